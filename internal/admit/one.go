package admit

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// DecideOne is [Core.Decide] for a request that charges n units to key on
// every limit, without the caller's checks slice: on a core of one limit it
// allocates nothing (a checks slice handed to Decide escapes, because
// [floodgate.TakeAll] may keep it). On a core of several limits it builds
// the checks and calls Decide.
func (c *Core) DecideOne(ctx context.Context, key string, n int, ev floodgate.Event, start int64) Verdict {
	if len(c.limits) != 1 {
		checks := make([]floodgate.Check, len(c.limits))
		for i := range checks {
			checks[i].Key, checks[i].N = key, n
		}
		return c.Decide(ctx, checks, ev, start)
	}
	if c.cfg.DelayMode == DelayRefuse {
		if p := c.limits[0].Policy; p.Undelayed > 0 && p.Undelayed < p.Capacity {
			// A shaping limit refused rather than delayed: the checks go
			// through Decide's evaluation (a slice on the heap, on this
			// path only).
			return c.Decide(ctx, []floodgate.Check{{Key: key, N: n}}, ev, start)
		}
	}
	one := [1]floodgate.Check{{Limiter: c.limits[0].Limiter, Key: key, N: n}}
	d, err := takeOne(ctx, &one[0])
	v := c.judge(ctx, one[:], d, err, true)
	c.observe(&ev, start, &v, one[:])
	return v
}

// takeOne is take for one check, kept apart so that the check does not
// escape through TakeAll.
func takeOne(ctx context.Context, ch *floodgate.Check) (d floodgate.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = floodgate.Decision{}, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	ch.Decision, err = ch.Limiter.Take(ctx, ch.Key, ch.N)
	return ch.Decision, err
}

// Fail decides a request the transport could not put to its limits (its
// key or cost function failed or panicked) as if the limits had returned
// err: the fail mode and dry run apply, and the request's events are
// reported, one per limit of a fixed core (a dynamic core's: one, under
// its Name).
func (c *Core) Fail(ctx context.Context, err error, ev floodgate.Event, start int64) Verdict {
	if len(c.limits) == 0 {
		v := c.judge(ctx, nil, floodgate.Decision{}, err, false)
		c.observe(&ev, start, &v, nil)
		return v
	}
	one := [1]floodgate.Check{{Limiter: c.limits[0].Limiter}}
	checks := one[:]
	if len(c.limits) > 1 {
		checks = make([]floodgate.Check, len(c.limits))
		for i := range checks {
			checks[i].Limiter = c.limits[i].Limiter
		}
	}
	v := c.judge(ctx, checks, floodgate.Decision{}, err, false)
	c.observe(&ev, start, &v, checks)
	return v
}

// Judge is the verdict of a request whose checks the transport decided
// itself (the Envoy rate limit service, which decides a request's
// descriptors in store calls of its own): d is their combined decision
// ([floodgate.Combine]), err what kept them from deciding. Dry run, the
// fail mode and a store's fallback apply as in [Core.Decide]; nothing is
// charged, refunded or waited: a delay in d is ignored.
func (c *Core) Judge(checks []floodgate.Check, d floodgate.Decision, err error) Verdict {
	d.Delay = 0
	return c.judge(context.Background(), checks, d, err, false)
}

// Report reports the events of a request judged by [Core.Judge]: one
// event of source src per check, as Decide reports them (each with its
// check's own decision; a check that would have admitted a request another
// refused reports allowed), named names[i] (nil: by each check's policy).
// A request without checks gets one event, under the core's Name. ev and
// start are as in Decide.
func (c *Core) Report(src floodgate.Source, ev floodgate.Event, start int64, v Verdict, checks []floodgate.Check, names []string) {
	c.reportNamed(src, ev, start, v, checks, names)
}
