package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// The probe back-off of the breaker: the first probe goes minProbeWait after
// the failure that opened it, each failed probe doubles the wait, up to
// maxProbeWait. maxProbeWait bounds both the connection attempts of a store
// while Redis is down (1/maxProbeWait per second, 20) and how long after
// Redis answers again the store goes back to it.
const (
	minProbeWait = 5 * time.Millisecond
	maxProbeWait = 50 * time.Millisecond
)

// answerGrain is how precisely the breaker keeps the time of the latest
// answer from Redis: it writes it at most once per answerGrain, so that a
// busy store does not write one shared word per call.
const answerGrain = time.Millisecond

// breaker keeps a store from sending to a Redis that does not answer: one
// that refuses connections (rueidis dials again for every command sent on a
// broken connection: without the breaker every decision of every goroutine
// is a connection attempt) and one that hangs (every decision would wait its
// whole timeout).
//
// Closed (the normal state), every call goes to Redis. It opens on a
// connection error (anything but a Redis error reply, a malformed reply or a
// context error), and on a call that timed out while Redis answered nothing
// from the moment it was sent (a stall: no reply to any call of the store
// for the whole timeout). Open, calls fail at once, without touching the
// network. One probe at a time (a PING, on a goroutine of its own, bounded
// by the store's timeout) goes after a back-off; when Redis answers it (or
// any call still in flight), the breaker closes; when it fails, the next
// probe waits twice as long, up to maxProbeWait. A call ended by its
// caller's context tells nothing about Redis.
type breaker struct {
	open     atomic.Bool  // read on every call; written under mu
	answered atomic.Int64 // Nanotime of the latest answer from Redis, to within answerGrain; only grows
	trips    atomic.Int64 // how many times the breaker opened (the divided fallback's switches)

	mu      sync.Mutex
	probing bool          // a probe is in flight
	next    int64         // monotime.Nanotime at or after which the next probe may go
	wait    time.Duration // the current back-off
	err     error         // what open calls fail with: the last failure, wrapped
	clock   func() int64  // tests only; nil: monotime.Nanotime

	// probe sends one probe and returns its outcome, within the store's
	// timeout; nil: the probe is due, not sent (tests then call probed).
	probe func() error
	// probes counts the probes started (tests).
	probes atomic.Int64
}

func (b *breaker) now() int64 {
	if b.clock != nil {
		return b.clock()
	}
	return monotime.Nanotime()
}

// errOpen is wrapped by the error of every call the breaker refuses.
var errOpen = errors.New("redisstore: not sending to Redis after a failure (one probe at a time)")

// admit reports whether a call may go to Redis: a nil error, with the time
// the call is sent (to pass to done); else the error to fail with.
func (b *breaker) admit() (sent int64, err error) {
	now := b.now()
	if !b.open.Load() {
		return now, nil
	}
	return now, b.refuse(now)
}

// refuse returns the error of a call while the breaker is open (nil when it
// closed meanwhile), and starts a probe when one is due.
func (b *breaker) refuse(now int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return nil
	}
	if !b.probing && now >= b.next {
		b.probing = true
		b.probes.Add(1)
		if b.probe != nil {
			go func() { b.probed(b.probe()) }()
		}
	}
	return b.err
}

// done records the outcome err of a call that admit let through at sent.
// cancelled says that the caller's own context was done: such an outcome
// tells nothing about Redis.
func (b *breaker) done(sent int64, err error, cancelled bool) {
	if isAnswer(err) {
		b.answer()
		return
	}
	if cancelled || b.open.Load() {
		return
	}
	if isConnError(err) || b.stalled(sent, err) {
		b.trip(err)
	}
}

// stalled reports whether err is the timeout of a call sent at sent during
// which Redis answered no call at all. The time of the latest answer may be
// up to answerGrain old: the silence seen may be that much shorter than the
// timeout.
func (b *breaker) stalled(sent int64, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && b.answered.Load() < sent
}

// answer records an answer from Redis: it closes the breaker.
func (b *breaker) answer() {
	now := b.now()
	for old := b.answered.Load(); now-old >= int64(answerGrain); old = b.answered.Load() {
		if b.answered.CompareAndSwap(old, now) {
			break
		}
	}
	if b.open.Load() {
		b.mu.Lock()
		b.open.Store(false)
		b.mu.Unlock()
	}
}

// trip opens the breaker after the failure err.
func (b *breaker) trip(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		return
	}
	b.wait = minProbeWait
	b.next = b.now() + int64(b.wait)
	b.err = fmt.Errorf("%w: %w", errOpen, err)
	b.trips.Add(1)
	b.open.Store(true)
}

// probed records the outcome of a probe.
func (b *breaker) probed(err error) {
	if isAnswer(err) {
		b.answer()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if !b.open.Load() {
		return
	}
	b.wait = min(2*b.wait, maxProbeWait)
	b.next = b.now() + int64(b.wait)
	b.err = fmt.Errorf("%w: %w", errOpen, err)
}

// isAnswer reports whether err (nil included) says that Redis answered: a
// result, an error reply, a malformed reply.
func isAnswer(err error) bool {
	return err == nil || !isConnError(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
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
