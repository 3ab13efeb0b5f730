package adaptive

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
)

// Order is the service order of the wait queue.
type Order uint8

const (
	// FIFO serves the longest waiting request first (within a rank).
	FIFO Order = iota
	// LIFO serves the newest request first (within a rank): under sustained
	// overload the oldest waiters, whose callers have probably given up, are
	// the ones left to time out.
	LIFO
)

// LimitChange describes one change of a [Gate]'s limit.
type LimitChange struct {
	// Old and New are the limits before and after the window.
	Old, New int
	// Sample is the window that caused the change.
	Sample Sample
	// At is the clock reading when the window closed.
	At time.Time
}

// Leak describes a token that was not released within the maximum age (see
// [WithMaxAge]).
type Leak struct {
	// Age is how old the token was when it was reclaimed.
	Age time.Duration
	// Label is the label of the request that took it.
	Label string
	// At is the clock reading when it was reclaimed.
	At time.Time
}

// Option configures a [Gate]. Build one with the With... and On...
// functions of this package.
type Option struct{ apply func(*options) error }

type options struct {
	clock      floodgate.Clock
	observer   floodgate.Observer
	name       string
	onChange   func(LimitChange)
	onLeak     func(Leak)
	minSamples int
	window     time.Duration
	minRTT     time.Duration
	maxAge     time.Duration
	queue      int
	order      Order
}

func defaultOptions() options {
	return options{
		clock:      monotime.Clock{},
		observer:   floodgate.ObserverFunc(func(floodgate.Event) {}),
		minSamples: 10,
		window:     time.Second,
		minRTT:     100 * time.Microsecond,
		maxAge:     time.Minute,
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: adaptive: "+format, append([]any{floodgate.ErrInvalidConfig}, args...)...)
}

// WithClock sets the clock that times requests and windows. Default
// the system clock.
func WithClock(c floodgate.Clock) Option {
	return Option{func(o *options) error {
		if c == nil {
			return invalid("nil clock")
		}
		o.clock = c
		return nil
	}}
}

// WithObserver sets the observer that receives every admission
// ([floodgate.OutcomeAllowed]) and every rejection ([floodgate.OutcomeShed]),
// with the gate's name as Event.Policy and the request's label as
// Event.Class. Default: none.
func WithObserver(obs floodgate.Observer) Option {
	return Option{func(o *options) error {
		if obs == nil {
			return invalid("nil observer")
		}
		o.observer = obs
		return nil
	}}
}

// WithName sets the name reported as Event.Policy.
func WithName(name string) Option {
	return Option{func(o *options) error { o.name = name; return nil }}
}

// OnLimitChange registers f, called after every window that changes the
// limit. It runs on the goroutine that released the request closing the
// window, after the gate's lock is released; it must be fast.
func OnLimitChange(f func(LimitChange)) Option {
	return Option{func(o *options) error { o.onChange = f; return nil }}
}

// OnLeak registers f, called for every token reclaimed because it outlived
// the maximum age (see [WithMaxAge]), outside the gate's lock.
func OnLeak(f func(Leak)) Option {
	return Option{func(o *options) error { o.onLeak = f; return nil }}
}

// WithWindow sets the sampling window: a window closes at the first release
// at least d after it opened, and reaches the algorithm only when it holds at
// least minSamples requests (smaller windows are discarded). Defaults 10
// samples and 1s, the reference values; minSamples >= 1, d > 0.
func WithWindow(minSamples int, d time.Duration) Option {
	return Option{func(o *options) error {
		if minSamples < 1 || d <= 0 {
			return invalid("window needs >= 1 sample and a positive duration, got %d and %v", minSamples, d)
		}
		o.minSamples, o.window = minSamples, d
		return nil
	}}
}

// WithMinRTT sets the RTT under which a successful request is not measured
// (too fast to say anything about the server: a cache hit, a validation
// error). Drops are counted whatever their RTT. Default 100µs; d >= 0.
func WithMinRTT(d time.Duration) Option {
	return Option{func(o *options) error {
		if d < 0 {
			return invalid("negative minimum RTT %v", d)
		}
		o.minRTT = d
		return nil
	}}
}

// WithMaxAge sets how long a token may stay unreleased before the gate
// treats it as leaked: it frees its slot, counts it in Stats.Leaked and
// calls the [OnLeak] hook; a late Success, Dropped or Ignore on it does
// nothing. Set it well above the slowest legitimate request. Zero disables
// leak detection. Default one minute.
func WithMaxAge(d time.Duration) Option {
	return Option{func(o *options) error {
		if d < 0 {
			return invalid("negative maximum age %v", d)
		}
		o.maxAge = d
		return nil
	}}
}

// WithQueue makes Acquire wait when the limit is reached: up to size
// requests wait in a queue served in the given order (higher
// [Request.Rank] first) until a slot frees or their context ends. A request
// that finds the queue full is rejected at once, unless it outranks a waiter,
// which is then rejected in its place. size >= 1.
func WithQueue(size int, order Order) Option {
	return Option{func(o *options) error {
		if size < 1 || order > LIFO {
			return invalid("queue needs size >= 1 and order FIFO or LIFO, got %d and %d", size, order)
		}
		o.queue, o.order = size, order
		return nil
	}}
}
