package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
)

// The probe back-off of the breaker: the first probe goes minProbeWait after
// the connection error that opened it, each failed probe doubles the wait,
// up to maxProbeWait. maxProbeWait bounds both the connection attempts of a
// store while Redis is down (1/maxProbeWait per second, 20) and how long
// after Redis answers again the store goes back to it.
const (
	minProbeWait = 5 * time.Millisecond
	maxProbeWait = 50 * time.Millisecond
)

// breaker keeps a store from dialling Redis on every decision while Redis
// refuses connections: rueidis dials again for every command sent on a
// broken connection, so without it every decision of every goroutine is a
// connection attempt (thousands per second from one process).
//
// Closed (the normal state), every call goes to Redis. A connection error
// (anything but a Redis error reply, a malformed reply or a context error)
// opens it: calls then fail at once, without touching the network, except
// one probe at a time, let through after a back-off. The probe is a real
// call; when Redis answers it (with a result or an error reply), the breaker
// closes; when it fails, the next probe waits twice as long, up to
// maxProbeWait.
type breaker struct {
	open atomic.Bool // read on every call; written under mu

	mu      sync.Mutex
	probing bool          // a probe is in flight
	next    int64         // floodgate.Nanotime at or after which the next probe may go
	wait    time.Duration // the current back-off
	err     error         // what open calls fail with: the last connection error, wrapped
	clock   func() int64  // tests only; nil: floodgate.Nanotime
}

func (b *breaker) now() int64 {
	if b.clock != nil {
		return b.clock()
	}
	return floodgate.Nanotime()
}

// errOpen is wrapped by the error of every call the breaker refuses.
var errOpen = errors.New("redisstore: not sending to Redis after a connection error (one probe at a time)")

// admit reports whether a call may go to Redis, and whether it is the
// probe. A refused call gets the error to fail with.
func (b *breaker) admit() (probe bool, err error) {
	if !b.open.Load() {
		return false, nil
	}
	return b.admitOpen()
}

func (b *breaker) admitOpen() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return false, nil
	}
	if b.probing || b.now() < b.next {
		return false, b.err
	}
	b.probing = true
	return true, nil
}

// done records the outcome err of a call that admit let through.
// cancelled says that the caller's own context was done: such an outcome
// tells nothing about Redis.
func (b *breaker) done(probe bool, err error, cancelled bool) {
	if !probe && (err == nil || b.open.Load()) {
		return
	}
	b.record(probe, err, cancelled)
}

func (b *breaker) record(probe bool, err error, cancelled bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !probe {
		if !cancelled && isConnError(err) && !b.open.Load() {
			b.wait = minProbeWait
			b.next = now + int64(b.wait)
			b.err = fmt.Errorf("%w: %w", errOpen, err)
			b.open.Store(true)
		}
		return
	}
	b.probing = false
	switch {
	case cancelled:
		// Nothing learnt: the next call probes.
	case err == nil || !isConnError(err) && !errors.Is(err, context.DeadlineExceeded):
		b.open.Store(false) // Redis answered
	default:
		b.wait = min(2*b.wait, maxProbeWait)
		b.next = now + int64(b.wait)
		b.err = fmt.Errorf("%w: %w", errOpen, err)
	}
}

// isConnError reports whether err says that Redis could not be reached
// (dial refused, connection reset or closed, client closed), as opposed to
// an answer from Redis (an error reply, a malformed reply) or a call that
// ran out of time.
func isConnError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errReply) {
		return false
	}
	var reply *rueidis.RedisError // an error reply, or a nil reply
	return !errors.As(err, &reply)
}
