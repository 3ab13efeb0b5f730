package floodgate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// Check is one limit of a [TakeAll]: a limiter, the key to charge on it and
// the cost. TakeAll writes the limiter's own decision to Decision, so that a
// caller can tell which limits refused (Decision.Allowed false) and write a
// header per policy.
type Check struct {
	// Limiter decides this check.
	Limiter Limiter
	// Key is the key charged on Limiter (each check has its own: "per IP"
	// and "per API key" in one request).
	Key string
	// N is the cost, N >= 1.
	N int
	// Decision is set by TakeAll: what Limiter decided for this check.
	Decision Decision
}

// GroupTaker is implemented by limiters that decide a whole group of checks
// themselves, all or nothing, without take-then-refund (the keyed limiters
// of the store package do, on memory and in one Redis script). TakeAll
// hands a group to the first check's limiter when it implements GroupTaker.
//
// TakeGroup reports false, having done nothing, when it cannot decide this
// group (a check on a limiter of another kind). Otherwise it sets every
// check's Decision: with commit true it consumes from every check when all
// admit and changes no state anywhere when one denies; with commit false it
// changes nothing and only reports. A refusing check's Decision is its
// denial, so its RetryAfter is exact; when the group is refused, a check
// that would have admitted reports its state as it stands (charged
// nothing).
type GroupTaker interface {
	TakeGroup(ctx context.Context, checks []Check, commit bool) (bool, error)
}

// TakeAll admits a request only when every check admits it: all or nothing,
// across limiters and keys ("100 per minute per IP AND 1000 per hour per API
// key"). It sets every check's Decision (on a refusal, the refusing checks'
// denials and the other checks' state as it stands, charged nothing) and
// returns the combined one:
//
//   - Admitted: Allowed; Limit and Remaining from the check with the fewest
//     units remaining; ResetAfter and Delay the largest.
//   - Refused: not Allowed; RetryAfter the largest among the checks that
//     refused, so that a client waiting RetryAfter finds every limit open
//     again (if nobody else spent it); Limit and Remaining from the refusing
//     check with that RetryAfter; ResetAfter the largest. A refusal consumes
//     nothing from any check.
//
// When every limiter is a [GroupTaker] of one kind (the store package's keyed
// limiters), the group is decided without touching any state on a refusal:
// a refused request leaves every limiter bit for bit as it was. Otherwise
// each check is taken in turn (all of them, so that every refusal's
// RetryAfter is known) and the admitted ones are refunded on a refusal;
// then every limiter must implement [Refunder], and a concurrent request may
// observe the units between the take and the refund.
//
// An error means the group could not be decided: the checks' Decisions are
// then unspecified and nothing was consumed, except that a failing refund
// is reported too (joined to the error).
func TakeAll(ctx context.Context, checks []Check) (Decision, error) {
	if len(checks) == 0 {
		return Decision{}, fmt.Errorf("%w: TakeAll needs at least one check", ErrInvalidConfig)
	}
	for i := range checks {
		if isNil(checks[i].Limiter) {
			return Decision{}, fmt.Errorf("%w: TakeAll: check %d has a nil limiter", ErrInvalidConfig, i)
		}
	}
	if g, ok := checks[0].Limiter.(GroupTaker); ok {
		handled, err := g.TakeGroup(ctx, checks, true)
		if handled {
			if err != nil {
				return Decision{}, err
			}
			return Combine(checks), nil
		}
	}
	return takeEach(ctx, checks)
}

// takeEach is TakeAll for limiters that cannot decide a group: take every
// check, refund the admitted ones when any refused.
func takeEach(ctx context.Context, checks []Check) (Decision, error) {
	refused := false
	var err error
	taken := 0
	for i := range checks {
		c := &checks[i]
		c.Decision, err = c.Limiter.Take(ctx, c.Key, c.N)
		if err != nil {
			break
		}
		taken = i + 1
		refused = refused || !c.Decision.Allowed
	}
	if err == nil && !refused {
		return Combine(checks), nil
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for i := range checks[:taken] {
		c := &checks[i]
		if !c.Decision.Allowed {
			continue
		}
		r, ok := c.Limiter.(Refunder)
		if !ok {
			errs = append(errs, fmt.Errorf("%w: TakeAll: limiter %d (%T) cannot refund", ErrInvalidConfig, i, c.Limiter))
			continue
		}
		if rerr := r.Refund(context.WithoutCancel(ctx), c.Key, c.N); rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		// Refunded: report what the key has now, as a group taker does.
		c.Decision.Remaining = min(c.Decision.Limit, c.Decision.Remaining+int64(c.N))
	}
	if len(errs) > 0 {
		return Decision{}, errors.Join(errs...)
	}
	return Combine(checks), nil
}

// Combine merges the Decisions of checks the way [TakeAll] does: the
// combined verdict of a group.
func Combine(checks []Check) Decision {
	var out Decision
	refusing := -1
	for i := range checks {
		d := checks[i].Decision
		if !d.Allowed && (refusing < 0 || d.RetryAfter > checks[refusing].Decision.RetryAfter) {
			refusing = i
		}
	}
	for i := range checks {
		d := checks[i].Decision
		if i == 0 {
			out = d
			continue
		}
		if d.Remaining < out.Remaining || (d.Remaining == out.Remaining && d.Limit < out.Limit) {
			out.Limit, out.Remaining = d.Limit, d.Remaining
		}
		out.ResetAfter = max(out.ResetAfter, d.ResetAfter)
		out.Delay = max(out.Delay, d.Delay)
		out.Fallback = out.Fallback || d.Fallback
	}
	if refusing >= 0 {
		d := checks[refusing].Decision
		out.Allowed = false
		out.Limit, out.Remaining, out.RetryAfter = d.Limit, d.Remaining, d.RetryAfter
		out.Delay = 0
	} else {
		out.Allowed = true
		out.RetryAfter = 0
	}
	return out
}

// All returns a Limiter that admits a request only when every one of
// limiters admits it for the same key: "10 per second AND 1000 per hour".
// It is [TakeAll] over one key: a refusal consumes nothing anywhere, and
// its RetryAfter is the largest among the limiters that refuse. For limits
// on different keys, or to learn which limiter refused, call TakeAll.
// All does not describe itself ([Describer]): a middleware advertises it as
// one policy whose quota is the decision's limit. To advertise each limit
// in the response's RateLimit-Policy, give the middleware the limiters
// themselves (httplimit and grpclimit's WithLimit), which decides them
// the same way, all or nothing.
//
// All returns an error wrapping [ErrInvalidConfig] when limiters is empty,
// holds a nil (or typed-nil) limiter, or one that is neither a [GroupTaker]
// nor a [Refunder]. The returned Limiter is a [Refunder]
// (refunding every limiter that is one) and is safe for concurrent use.
func All(limiters ...Limiter) (Limiter, error) {
	if len(limiters) == 0 {
		return nil, fmt.Errorf("%w: All needs at least one limiter", ErrInvalidConfig)
	}
	for i, l := range limiters {
		if isNil(l) {
			return nil, fmt.Errorf("%w: All: limiter %d is nil", ErrInvalidConfig, i)
		}
		_, group := l.(GroupTaker)
		_, refund := l.(Refunder)
		if !group && !refund {
			return nil, fmt.Errorf("%w: All: limiter %d (%T) can neither decide a group nor refund", ErrInvalidConfig, i, l)
		}
	}
	a := &all{limiters: append([]Limiter(nil), limiters...)}
	a.pool.New = func() any { s := make([]Check, len(a.limiters)); return &s }
	return a, nil
}

type all struct {
	limiters []Limiter
	pool     sync.Pool // *[]Check
}

func (a *all) Take(ctx context.Context, key string, n int) (Decision, error) {
	cs := a.pool.Get().(*[]Check)
	checks := *cs
	for i, l := range a.limiters {
		checks[i] = Check{Limiter: l, Key: key, N: n}
	}
	d, err := TakeAll(ctx, checks)
	clear(checks)
	a.pool.Put(cs)
	return d, err
}

// Refund gives n back to every limiter.
func (a *all) Refund(ctx context.Context, key string, n int) error {
	var errs []error
	for i, l := range a.limiters {
		r, ok := l.(Refunder)
		if !ok {
			errs = append(errs, fmt.Errorf("%w: All: limiter %d (%T) cannot refund", ErrInvalidConfig, i, l))
			continue
		}
		if err := r.Refund(context.WithoutCancel(ctx), key, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isNil reports whether l is nil or a typed nil.
func isNil(l any) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}
