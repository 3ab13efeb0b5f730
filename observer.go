package floodgate

import "time"

// Outcome is what happened to one request, as reported to an [Observer].
type Outcome uint8

// The outcomes. Their String forms are stable and meant as metric labels.
const (
	// OutcomeAllowed: the limiter admitted the request.
	OutcomeAllowed Outcome = iota + 1
	// OutcomeDenied: the limiter denied the request (429).
	OutcomeDenied
	// OutcomeWouldDeny: dry-run mode; the limiter would have denied, the
	// request was let through.
	OutcomeWouldDeny
	// OutcomeErrorOpen: the limiter could not decide and the fail-open policy
	// let the request through.
	OutcomeErrorOpen
	// OutcomeErrorClosed: the limiter could not decide and the fail-closed
	// policy denied the request.
	OutcomeErrorClosed
	// OutcomeFallback: the shared store could not decide and a local fallback
	// limiter decided instead (see Event.Decision for its verdict).
	OutcomeFallback
	// OutcomeShed: a concurrency limiter shed the request for overload (503).
	OutcomeShed
	// OutcomeDelayed: a shaping limiter admitted the request after a delay.
	OutcomeDelayed
	// OutcomeConfigApplied: a config change was applied (an event of
	// [SourceConfig], not a request).
	OutcomeConfigApplied
	// OutcomeConfigRefused: a config change was refused, the running
	// config stays (an event of [SourceConfig], with the error in Err).
	OutcomeConfigRefused
)

var outcomeNames = [...]string{
	OutcomeAllowed:     "allowed",
	OutcomeDenied:      "denied",
	OutcomeWouldDeny:   "would_deny",
	OutcomeErrorOpen:   "error_open",
	OutcomeErrorClosed: "error_closed",
	OutcomeFallback:    "fallback",
	OutcomeShed:        "shed",
	OutcomeDelayed:     "delayed",

	OutcomeConfigApplied: "config_applied",
	OutcomeConfigRefused: "config_refused",
}

// String returns the outcome's stable lower-case label, or "unknown".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// Source says which layer reported an [Event], so that one observer can be
// given to a transport and to a store without counting a request twice.
type Source uint8

// The sources. Their String forms are stable and meant as metric labels.
const (
	// SourceRequest: a request's admission, reported by the transport
	// (middleware, interceptor, Envoy service) or the concurrency limiter
	// that decided it; the HTTP and gRPC middlewares report one event per
	// (request, limit), so count a limit's requests on these, summed by
	// policy.
	SourceRequest Source = iota + 1
	// SourceStore: a store's own outcome (a fallback decision, an error),
	// reported by the store in addition to the request's event. Never
	// count requests on these.
	SourceStore
	// SourceConfig: a config change, applied or refused (a policy set's
	// reload), with the outcome OutcomeConfigApplied or
	// OutcomeConfigRefused. Not a request.
	SourceConfig
	// SourceShadow: the verdict of the dry-run limits a request was
	// checked against beside its enforcing ones (a policy set's dry_run
	// policies), reported in addition to the request's event, which carries
	// the enforcing verdict: OutcomeAllowed, or OutcomeWouldDeny with the
	// dry-run policy that would have refused. Never count requests on
	// these; count what a shadow limit would do.
	SourceShadow
)

// String returns "request" (for SourceRequest and the zero Source, which
// means it), "store", "config", "shadow" or "unknown".
func (s Source) String() string {
	switch s {
	case SourceRequest, 0:
		return "request"
	case SourceStore:
		return "store"
	case SourceConfig:
		return "config"
	case SourceShadow:
		return "shadow"
	}
	return "unknown"
}

// Event describes one decision for an [Observer].
type Event struct {
	// Source is the layer that reported the event. The zero value means
	// SourceRequest.
	Source Source
	// Policy names the limit that decided (e.g. "api-per-ip"): the
	// limiter's Name, or the transport's WithName.
	Policy string
	// Tier is an optional tier label (e.g. "edge", "global").
	Tier string
	// Route is an optional route class (e.g. "/search"), never a raw URL.
	Route string
	// Class is the priority class of the request ("critical", "standard",
	// "best-effort") where a priority shedder classified it, else "".
	Class string
	// Outcome is what happened.
	Outcome Outcome
	// Decision is the limiter's verdict, when it gave one.
	Decision Decision
	// Err is the error that made the limiter fail, for the error and fallback
	// outcomes.
	Err error
	// Latency is how long the decision took.
	Latency time.Duration
}

// Observer receives every decision. Observe is called synchronously on the
// request path, from many goroutines at once: it must be safe for concurrent
// use, fast, and must not block. It must not retain the Event's Err beyond
// the call unless it copies what it needs.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the [Observer] interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
