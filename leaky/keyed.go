package leaky

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Status is what limit_req did with a request, as nginx reports it in
// $limit_req_status. The zero value is not a status.
type Status uint8

// The statuses; their String forms are exactly nginx's.
const (
	// StatusPassed: admitted, to be served at once.
	StatusPassed Status = iota + 1
	// StatusDelayed: admitted, to be served after Decision.Delay.
	StatusDelayed
	// StatusRejected: denied.
	StatusRejected
	// StatusDelayedDryRun: dry run; would have been delayed, admitted
	// without delay (and charged).
	StatusDelayedDryRun
	// StatusRejectedDryRun: dry run; would have been rejected, admitted
	// (and not charged).
	StatusRejectedDryRun
)

var statusNames = [...]string{
	StatusPassed:         "PASSED",
	StatusDelayed:        "DELAYED",
	StatusRejected:       "REJECTED",
	StatusDelayedDryRun:  "DELAYED_DRY_RUN",
	StatusRejectedDryRun: "REJECTED_DRY_RUN",
}

// String returns nginx's name of the status ("PASSED", "DELAYED_DRY_RUN",
// ...), or "" for the zero Status, as $limit_req_status is empty when no
// limit applied.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// StatusOf maps the verdict of the limit (the Decision of the limiter,
// before a transport applies dry run) to its status: REJECTED when denied,
// DELAYED when admitted with a Delay, PASSED otherwise; with dryRun the
// DELAYED and REJECTED cases become DELAYED_DRY_RUN and REJECTED_DRY_RUN.
func StatusOf(verdict floodgate.Decision, dryRun bool) Status {
	switch {
	case !verdict.Allowed && dryRun:
		return StatusRejectedDryRun
	case !verdict.Allowed:
		return StatusRejected
	case verdict.Delay > 0 && dryRun:
		return StatusDelayedDryRun
	case verdict.Delay > 0:
		return StatusDelayed
	}
	return StatusPassed
}

// NewKeyed returns the leaky bucket described by c, running on s: nginx's
// limit_req for each key. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when c is invalid or s nil. Requests may cost
// 1..c.Capacity() (Burst+1); larger costs are refused with
// [floodgate.ErrCostExceedsCapacity]. Nothing in the limiter sleeps: a
// delayed request is admitted with Decision.Delay set, and the caller (or
// [Shape]) waits.
//
// limit_req_dry_run is the transports' dry-run mode: a dry run admits every
// request while the state evolves exactly as when enforcing (admitted and
// delayed requests are charged, refused ones are not, since a denial
// consumes nothing); [StatusOf] gives the nginx status of a decision.
func NewKeyed(s store.Store, c Config) (*store.Limiter, error) {
	alg, err := c.Algorithm()
	if err != nil {
		return nil, err
	}
	return store.NewLimiter(s, alg)
}
