package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
)

// ErrLimitExceeded is the rejection: every error that Acquire returns for a
// request it shed wraps it (test with errors.Is). When the request waited in
// the queue until its context ended, the error also wraps the context's error.
var ErrLimitExceeded = errors.New("adaptive: concurrency limit exceeded")

// ErrDropped can be wrapped by the error of the function given to
// [Gate.Do] to report the request as dropped (the server shed it or timed
// out) rather than merely failed.
var ErrDropped = errors.New("adaptive: request dropped")

// Request describes how one caller asks for a slot; the zero value asks for
// any free slot with no label. Package priority builds on it.
type Request struct {
	// Share in (0, 1] is the fraction of the limit this request may use: it
	// is admitted only while in-flight < Share*limit. Zero (or anything
	// outside (0, 1]) means 1.
	Share float64
	// Rank orders the wait queue: a waiter of higher rank is served first.
	// A request that outranks a waiter may take its place in a full queue.
	// Ranks should not have smaller shares than lower ranks.
	Rank int
	// Label is reported to the observer as Event.Class (e.g. a class name).
	Label string
}

// Stats is a snapshot of a [Gate]'s counters.
type Stats struct {
	// Limit is the current concurrency limit.
	Limit int
	// InFlight is the number of unreleased tokens (leaked ones excluded).
	InFlight int
	// Queued is the number of requests waiting in the queue.
	Queued int
	// Admitted and Rejected count Acquire outcomes.
	Admitted, Rejected uint64
	// Succeeded, Dropped and Ignored count how tokens ended.
	Succeeded, Dropped, Ignored uint64
	// Leaked counts tokens reclaimed after the maximum age; Late counts the
	// Success, Dropped or Ignore calls that came after such a reclaim.
	Leaked, Late uint64
	// Windows counts the windows that reached the algorithm.
	Windows uint64
}

// Gate is an adaptive concurrency limiter. It counts requests in flight,
// admits a request while the count is below the limit, and hands out a
// [Token] that the caller ends with Success, Dropped or Ignore. The tokens'
// outcomes and RTTs are gathered into windows that the [Controller] turns into
// the next limit. (A gate, not a [floodgate.Limiter]: it has no key and no
// Take, and it bounds the work in flight, not a rate.)
//
// A Gate is safe for concurrent use. Create it with [NewGate].
type Gate struct {
	o   options
	alg Controller

	mu       sync.Mutex
	limit    int
	inflight int
	last     int64  // last clock reading, Unix ns (time never goes back)
	head     *Token // oldest token in flight
	tail     *Token
	win      window
	waiters  waitQueue
	seq      uint64
	lastRTT  time.Duration
	st       Stats
	pending  []handoff // callbacks to run at the next unlock
}

// handoff is a queued request's outcome, to deliver after the lock.
type handoff struct {
	w *waiter
	t *Token
	d floodgate.Decision
}

// window accumulates the samples of the current window.
type window struct {
	start    int64
	count    int
	measured int
	dropped  int
	sum      int64
	min      int64
	inflight int
}

// NewGate returns a Gate driven by alg, or an error wrapping
// [floodgate.ErrInvalidConfig].
func NewGate(alg Controller, opts ...Option) (*Gate, error) {
	if nilcheck.Is(alg) {
		return nil, invalid("nil algorithm")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt.apply == nil {
			continue // the zero Option does nothing
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	l := &Gate{o: o, alg: alg, limit: alg.InitialLimit()}
	if l.limit < 1 {
		return nil, invalid("initial limit must be >= 1, got %d", l.limit)
	}
	l.waiters.lifo = o.order == LIFO
	return l, nil
}

// Acquire asks for a slot: it returns a token to end with Success, Dropped
// or Ignore, or a rejection wrapping [ErrLimitExceeded]. Without a queue
// ([WithQueue]) it never blocks; with one it waits until a slot frees or ctx
// ends, never past ctx's deadline. A ctx already done returns its error.
func (l *Gate) Acquire(ctx context.Context) (*Token, error) {
	return l.AcquireRequest(ctx, Request{})
}

// AcquireRequest is Acquire for a request with a share of the limit, a rank
// and a label (see [Request]).
func (l *Gate) AcquireRequest(ctx context.Context, r Request) (*Token, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err, w := l.enter(r, nil)
	if w == nil {
		return t, err
	}
	return l.wait(ctx, w)
}

// AcquireFunc is the asynchronous Acquire, for event loops and simulations
// that must not block. It calls done exactly once with the token or the
// rejection, unless the request is cancelled first: at once when the request
// is admitted or rejected on arrival, and otherwise, when the gate has a
// queue, later, from the goroutine that frees the slot (inside its Success,
// Dropped or Ignore, after the gate's lock is released) or that evicts the
// request. done must not block.
//
// cancel withdraws a waiting request: it reports true when the request was
// still waiting (it is then counted and observed as shed, and done is never
// called), false when done has been or is being called.
func (l *Gate) AcquireFunc(r Request, done func(*Token, error)) (cancel func() bool) {
	t, err, w := l.enter(r, done)
	if w == nil {
		done(t, err)
		return func() bool { return false }
	}
	return func() bool {
		l.mu.Lock()
		if w.index < 0 {
			l.mu.Unlock()
			return false
		}
		l.waiters.remove(w)
		l.st.Rejected++
		d := l.decision(false)
		l.mu.Unlock()
		l.observe(w.label, floodgate.OutcomeShed, d, context.Canceled, l.elapsed(w.since))
		return true
	}
}

// enter admits, rejects or queues a request. When it queues it, it returns
// the waiter: a callback waiter when done is set, a channel waiter otherwise.
func (l *Gate) enter(r Request, done func(*Token, error)) (t *Token, err error, w *waiter) {
	share := r.Share
	if !(share > 0 && share <= 1) {
		share = 1
	}
	l.mu.Lock()
	now := l.now()
	leaks := l.reclaim(now)
	l.serve(now)
	switch {
	case l.fits(share):
		t = l.admit(now, r.Label)
		d := l.decision(true)
		l.unlock()
		l.leaked(leaks)
		l.observe(r.Label, floodgate.OutcomeAllowed, d, nil, 0)
		return t, nil, nil
	case l.o.queue == 0 || !l.enqueueable(r.Rank):
		l.st.Rejected++
		d := l.decision(false)
		l.unlock()
		l.leaked(leaks)
		l.observe(r.Label, floodgate.OutcomeShed, d, nil, 0)
		return nil, ErrLimitExceeded, nil
	}
	w = &waiter{done: done, rank: r.Rank, share: share, label: r.Label, seq: l.seq, since: now}
	if done == nil {
		w.ch = make(chan *Token, 1)
	}
	l.seq++
	l.waiters.push(w)
	l.unlock()
	l.leaked(leaks)
	return nil, nil, w
}

// enqueueable makes room in the queue for a request of the given rank,
// evicting the waiter that would be served last when it ranks lower. It
// reports false when the request must be rejected. Called with l.mu held.
func (l *Gate) enqueueable(rank int) bool {
	if l.waiters.len() < l.o.queue {
		return true
	}
	v := l.waiters.last()
	if v == nil || v.rank >= rank {
		return false
	}
	l.waiters.remove(v)
	l.st.Rejected++
	l.handOff(v, nil)
	return true
}

// handOff gives a waiter out of the queue its token, or nil when it was
// evicted. Channel waiters get it at once; callbacks run at the next unlock.
// Called with l.mu held.
func (l *Gate) handOff(w *waiter, t *Token) {
	if w.done == nil {
		w.ch <- t
		return
	}
	l.pending = append(l.pending, handoff{w: w, t: t, d: l.decision(t != nil)})
}

// unlock releases l.mu, then runs the callbacks of the waiters handed off
// while it was held.
func (l *Gate) unlock() {
	p := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, h := range p {
		lat := l.elapsed(h.w.since)
		if h.t == nil {
			l.observe(h.w.label, floodgate.OutcomeShed, h.d, nil, lat)
			h.w.done(nil, ErrLimitExceeded)
			continue
		}
		l.observe(h.w.label, floodgate.OutcomeAllowed, h.d, nil, lat)
		h.w.done(h.t, nil)
	}
}

// wait blocks until w is served, evicted, or ctx ends.
func (l *Gate) wait(ctx context.Context, w *waiter) (*Token, error) {
	var t *Token
	select {
	case t = <-w.ch:
	case <-ctx.Done():
		l.mu.Lock()
		if w.index >= 0 {
			l.waiters.remove(w)
			l.st.Rejected++
			d := l.decision(false)
			l.mu.Unlock()
			err := ctx.Err()
			l.observe(w.label, floodgate.OutcomeShed, d, err, l.elapsed(w.since))
			return nil, fmt.Errorf("%w: %w", ErrLimitExceeded, err)
		}
		l.mu.Unlock()
		t = <-w.ch // served or evicted just before the context ended
	}
	l.mu.Lock()
	d := l.decision(t != nil)
	l.mu.Unlock()
	if t == nil {
		l.observe(w.label, floodgate.OutcomeShed, d, nil, l.elapsed(w.since))
		return nil, ErrLimitExceeded
	}
	l.observe(w.label, floodgate.OutcomeAllowed, d, nil, l.elapsed(w.since))
	return t, nil
}

// Do runs fn under a token: it acquires one (returning the rejection if
// any), runs fn and ends the token by fn's outcome: Success when fn returns
// nil, Dropped when its error wraps [ErrDropped] or
// [context.DeadlineExceeded], Ignore for any other error and when fn panics
// (the panic continues after the token is released).
func (l *Gate) Do(ctx context.Context, fn func(context.Context) error) error {
	t, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer t.Ignore() // no-op once ended; releases the slot on panic
	err = fn(ctx)
	switch {
	case err == nil:
		t.Success()
	case errors.Is(err, ErrDropped), errors.Is(err, context.DeadlineExceeded):
		t.Dropped()
	}
	return err
}

// Stats returns a snapshot of the counters. It also reclaims tokens older
// than the maximum age, so calling it periodically finds leaks even when no
// request comes.
func (l *Gate) Stats() Stats {
	l.mu.Lock()
	now := l.now()
	leaks := l.reclaim(now)
	l.serve(now)
	s := l.st
	s.Limit, s.InFlight, s.Queued = l.limit, l.inflight, l.waiters.len()
	l.unlock()
	l.leaked(leaks)
	return s
}

// now reads the clock; time never goes backwards. Called with l.mu held.
func (l *Gate) now() int64 {
	n := l.o.clock.Now().UnixNano()
	if n < l.last {
		return l.last
	}
	l.last = n
	return n
}

func (l *Gate) elapsed(since int64) time.Duration {
	return time.Duration(max(0, l.o.clock.Now().UnixNano()-since))
}

// fits reports whether a request with this share may take a slot now:
// in-flight < share*limit, with the product rounded up to whole slots
// (tolerating float error, so that 0.85*20 is 17 slots, not 18).
func (l *Gate) fits(share float64) bool {
	if share >= 1 {
		return l.inflight < l.limit
	}
	return float64(l.inflight) < math.Ceil(share*float64(l.limit)-1e-9)
}

// admit creates a token. Called with l.mu held.
func (l *Gate) admit(now int64, label string) *Token {
	l.inflight++
	l.st.Admitted++
	t := &Token{l: l, start: now, inflight: l.inflight, label: label, prev: l.tail}
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
	return t
}

// unlink removes t from the list of tokens in flight. Called with l.mu held.
func (l *Gate) unlink(t *Token) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
	l.inflight--
}

// serve hands free slots to eligible waiters. Called with l.mu held.
func (l *Gate) serve(now int64) {
	for w := l.waiters.peek(); w != nil && l.fits(w.share); w = l.waiters.peek() {
		l.waiters.pop()
		l.handOff(w, l.admit(now, w.label))
	}
}

// reclaim frees the slots of tokens older than the maximum age. Tokens are
// listed oldest first, so this looks at the head only. Called with l.mu held.
func (l *Gate) reclaim(now int64) []Leak {
	if l.o.maxAge <= 0 {
		return nil
	}
	var leaks []Leak
	for t := l.head; t != nil && now-t.start > int64(l.o.maxAge); t = l.head {
		l.unlink(t)
		t.reclaimed = true
		l.st.Leaked++
		leaks = append(leaks, Leak{Age: time.Duration(now - t.start), Label: t.label, At: time.Unix(0, now)})
	}
	return leaks
}

func (l *Gate) leaked(leaks []Leak) {
	if l.o.onLeak == nil {
		return
	}
	for _, lk := range leaks {
		l.o.onLeak(lk)
	}
}

// decision builds the Decision reported to the observer. Called with l.mu held.
func (l *Gate) decision(allowed bool) floodgate.Decision {
	d := floodgate.Decision{
		Allowed:   allowed,
		Limit:     int64(l.limit),
		Remaining: int64(min(max(l.limit-l.inflight, 0), l.limit)),
	}
	if !allowed {
		// Slots may remain for more important requests (a larger share),
		// none for this one.
		d.Remaining = 0
		d.RetryAfter = l.retryAfter()
	}
	return d
}

// retryAfter is the last window's mean RTT (about when a slot frees), at
// least 1ms, or 1s before the first measured window.
func (l *Gate) retryAfter() time.Duration {
	if l.lastRTT <= 0 {
		return time.Second
	}
	return max(l.lastRTT, time.Millisecond)
}

func (l *Gate) observe(label string, o floodgate.Outcome, d floodgate.Decision, err error, lat time.Duration) {
	l.o.observer.Observe(floodgate.Event{Source: floodgate.SourceRequest, Policy: l.o.name, Class: label, Outcome: o, Decision: d, Err: err, Latency: lat})
}

type outcome uint8

const (
	success outcome = iota
	dropped
	ignored
)

// release ends t.
func (l *Gate) release(t *Token, k outcome) {
	l.mu.Lock()
	now := l.now()
	if t.reclaimed {
		l.st.Late++
		l.mu.Unlock()
		return
	}
	l.unlink(t)
	switch k {
	case success:
		l.st.Succeeded++
		if rtt := now - t.start; rtt >= int64(l.o.minRTT) {
			l.sample(now, t.inflight, rtt, false)
		}
	case dropped:
		l.st.Dropped++
		l.sample(now, t.inflight, 0, true)
	default:
		l.st.Ignored++
	}
	change := l.closeWindow(now)
	leaks := l.reclaim(now)
	l.serve(now)
	l.unlock()
	l.leaked(leaks)
	if change != nil && l.o.onChange != nil {
		l.o.onChange(*change)
	}
}

// sample adds one request to the current window. Called with l.mu held.
func (l *Gate) sample(now int64, inflight int, rtt int64, drop bool) {
	w := &l.win
	if w.count == 0 {
		*w = window{start: now, min: math.MaxInt64}
	}
	w.count++
	w.inflight = max(w.inflight, inflight)
	if drop {
		w.dropped++
		return
	}
	w.measured++
	w.sum += rtt
	w.min = min(w.min, rtt)
}

// closeWindow feeds the window to the algorithm once it is old enough, and
// reports the limit change, if any. Called with l.mu held.
func (l *Gate) closeWindow(now int64) *LimitChange {
	w := l.win
	if w.count == 0 || now-w.start < int64(l.o.window) {
		return nil
	}
	l.win = window{}
	if w.count < l.o.minSamples {
		return nil
	}
	s := Sample{InFlight: w.inflight, Dropped: w.dropped, Count: w.count}
	if w.measured > 0 {
		s.RTT = time.Duration(w.sum / int64(w.measured))
		s.MinRTT = time.Duration(w.min)
		l.lastRTT = s.RTT
	}
	l.st.Windows++
	old := l.limit
	l.limit = max(1, l.alg.Update(s))
	if l.limit == old {
		return nil
	}
	return &LimitChange{Old: old, New: l.limit, Sample: s, At: time.Unix(0, now)}
}

// Token is one admitted request. End it with exactly one of Success, Dropped
// or Ignore; the first call releases the slot and later calls do nothing, so
// `defer t.Ignore()` right after Acquire is a safe net for early returns and
// panics. All methods are safe for concurrent use and on a nil *Token.
//
// A token that is never ended keeps its slot until it is older than the
// gate's maximum age ([WithMaxAge]); it is then reclaimed, counted in
// [Stats].Leaked and reported to the [OnLeak] hook.
type Token struct {
	l         *Gate
	start     int64
	inflight  int
	label     string
	done      atomic.Bool
	reclaimed bool // guarded by l.mu
	prev      *Token
	next      *Token
}

// Success ends the request as served: its RTT is measured (unless shorter
// than the minimum RTT, see [WithMinRTT]).
func (t *Token) Success() { t.end(success) }

// Dropped ends the request as dropped: the server shed it, or it timed out.
// Drops lower the limit whatever their RTT.
func (t *Token) Dropped() { t.end(dropped) }

// Ignore ends the request without a sample: its outcome says nothing about
// the server's capacity (a client error, a cancelled call, a panic).
func (t *Token) Ignore() { t.end(ignored) }

func (t *Token) end(k outcome) {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	t.l.release(t, k)
}
