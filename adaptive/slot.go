package adaptive

import (
	"context"
	"errors"
)

// Slot acquires a slot in the shape the middleware packages take for load
// shedding (middleware.Acquirer, which httplimit.Shed and grpclimit.Shed
// take): pass the method value,
//
//	shed, err := httplimit.Shed(middleware.AcquirerFunc(lim.Slot))
//
// ok is false when the request is shed: the limit is reached, or the request
// waited in the queue until its context ended. err is non-nil only when the
// gate could not decide. When ok is true, release must be called exactly
// once when the work ends: release(true) is [Token.Success], release(false)
// [Token.Dropped] (a failure or timeout the limit learns from).
func (l *Gate) Slot(ctx context.Context) (release func(success bool), ok bool, err error) {
	return slot(l.Acquire(ctx))
}

// slot turns an Acquire result into the (release, ok, err) shape.
func slot(tok *Token, err error) (func(bool), bool, error) {
	if err != nil {
		if errors.Is(err, ErrLimitExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return tok.release, true, nil
}

// SlotFunc is [Gate.Slot] for what acquires with something else than a
// context alone (a priority.Shedder and its class): it adapts any Acquire-shaped
// function to the middleware's shape.
func SlotFunc(acquire func(ctx context.Context) (*Token, error)) func(ctx context.Context) (release func(success bool), ok bool, err error) {
	return func(ctx context.Context) (func(bool), bool, error) {
		return slot(acquire(ctx))
	}
}

// release ends the token as a success or a drop.
func (t *Token) release(success bool) {
	if success {
		t.Success()
	} else {
		t.Dropped()
	}
}
