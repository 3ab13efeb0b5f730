package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// deadlines hands out shared deadline contexts so that the per-decision
// timeout costs no allocation: every call that starts within the same grain
// (a fraction of the timeout, at most 2ms) shares one context whose deadline
// is between timeout and timeout+grain after the call started. One context
// and one timer are made per grain while calls come in, not one per call.
type deadlines struct {
	timeout time.Duration
	grain   time.Duration
	show    bool // tests only (TestRueidisDeadlineBranch, BenchmarkDeadline): Deadline reports the deadline
	cur     atomic.Pointer[sharedDeadline]
	mu      sync.Mutex
}

func newDeadlines(timeout time.Duration) *deadlines {
	grain := min(timeout/10, 2*time.Millisecond)
	grain = max(grain, 10*time.Microsecond)
	return &deadlines{timeout: timeout, grain: grain}
}

// get returns a context that expires between timeout and timeout+grain from
// now.
func (d *deadlines) get() context.Context {
	now := monotime.Nanotime()
	if c := d.cur.Load(); c != nil && c.at-now >= int64(d.timeout) {
		return c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.cur.Load(); c != nil && c.at-now >= int64(d.timeout) {
		return c
	}
	life := d.timeout + d.grain
	c := &sharedDeadline{
		at:   now + int64(life),
		done: make(chan struct{}),
	}
	if d.show {
		c.wall = time.Now().Add(life)
	}
	time.AfterFunc(life, c.expire)
	d.cur.Store(c)
	return c
}

// sharedDeadline is a context.Context with a deadline and no parent, values
// or cancel function.
type sharedDeadline struct {
	at      int64     // monotime.Nanotime of the deadline
	wall    time.Time // the deadline, when shown (tests only)
	done    chan struct{}
	expired atomic.Bool
}

func (c *sharedDeadline) expire() {
	c.expired.Store(true)
	close(c.done)
}

// Deadline reports no deadline, on purpose: given a deadline, rueidis
// (v1.0.79, pipe.Do) runs a lone command on a connection that has not yet
// pipelined synchronously, with a connection deadline, and closes the
// connection when it passes; the next command then dials and waits for a
// new connection's handshake, whatever its context says. Without one,
// rueidis queues the command and abandons the wait when Done closes,
// keeping the connection. TestRueidisDeadlineBranch pins that branch (it
// fails when rueidis stops closing the connection: this is then no longer
// needed); BenchmarkDeadline measures both ways (closing the store's
// breaker after each timeout, to time the connection alone; 6 interleaved runs,
// median and min-max): after a timed-out call, the next decision takes
// 0.28ms (0.19-0.58) with no dial, against 2.5ms (1.8-2.9) and one dial
// per timeout with the deadline shown, up to 3% of them timing out too;
// the price is a lone decision on a quiet connection going through the
// background writer, 39.7us (33.4-52.0) against 33.9us (28.2-43.7).
func (c *sharedDeadline) Deadline() (time.Time, bool) { return c.wall, !c.wall.IsZero() }
func (c *sharedDeadline) Done() <-chan struct{}       { return c.done }
func (c *sharedDeadline) Value(any) any               { return nil }

func (c *sharedDeadline) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *sharedDeadline) String() string { return "redisstore.deadline" }

// noDeadline hides the deadline of a context from rueidis (see
// sharedDeadline.Deadline) and keeps everything else.
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }
