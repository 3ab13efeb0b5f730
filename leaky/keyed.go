package leaky

import (
	"github.com/floodgate-go/floodgate/store"
)

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
// consumes nothing).
func NewKeyed(s store.Store, c Config) (*store.Limiter, error) {
	alg, err := c.Algorithm()
	if err != nil {
		return nil, err
	}
	return store.NewLimiter(s, alg)
}
