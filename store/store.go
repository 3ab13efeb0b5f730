package store

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// MaxWords is the number of fixed-size words of state a store keeps per key.
const MaxWords = 6

// State is one key's state, owned by the algorithm that steps it. A store keeps
// it between calls without interpreting it, with one exception: W[0] is, by
// contract, the time (Unix microseconds) at or after which the state is back
// to full, so that a store may drop the key from then on without changing any
// decision.
//
// The zero State is a fresh key: full capacity.
type State struct {
	// W holds fixed-size state; Spec.Words of them are used.
	W [MaxWords]int64
	// Log holds variable-size state for the algorithms that need it (the
	// sliding log), bounded by Spec.MaxLog entries. Nil for the others. A
	// step may append into the slice's spare capacity (never changing the
	// entries it was given), so a store keeps at most one of the states
	// stepped from one input: no speculative step-then-retry on a shared log.
	Log []int64
}

// Spec tells a store what an algorithm needs.
type Spec struct {
	// Name identifies the algorithm ("token-bucket", "leaky-bucket", ...).
	Name string
	// Namespace is a 64-bit identity of the algorithm and its parameters.
	// Stores keep the state of different namespaces apart, so that two
	// limiters sharing a store and a key never read each other's state.
	Namespace uint64
	// Words is how many words of State.W the algorithm uses (1..MaxWords).
	Words int
	// MaxLog is the most entries the algorithm keeps in State.Log; 0 when it
	// keeps none.
	MaxLog int
	// Lua is the algorithm's twin for stores that run server-side scripts.
	Lua Lua
}

// Lua is the Lua twin of an algorithm's step, for stores that run scripts
// (the Redis store). Source is a Lua chunk that evaluates to a function
//
//	function(s, now, n, p) ... return s2, d end
//
// where s is the state as an array of numbers (s[1] is State.W[0], s.log
// the log when MaxLog > 0), now the time in Unix microseconds, n the cost (a
// negative n refunds), p the array of Params. It returns the new state and
// d = {allowed (0 or 1), limit, remaining, retry_after_us, reset_after_us,
// delay_us}. Given the same inputs it must return exactly what the Go Step
// returns: every arithmetic operation stays in integers below 2^53.
type Lua struct {
	Source string
	Params []int64
}

// Algorithm is a rate-limiting policy in the form a [Store] runs: a pure,
// deterministic step over a key's state. Implementations are immutable and
// safe for concurrent use.
type Algorithm interface {
	// Spec describes the algorithm. It returns the same value on every call.
	Spec() Spec

	// Step applies a request of cost n at time now (Unix microseconds) to
	// state s and returns the new state and the decision. It reads no clock
	// and has no side effects. A denial returns s unchanged (except for
	// normalisation that credits nothing). A negative n refunds -n units,
	// never beyond full capacity, and is always allowed. n == 0 peeks. Step
	// never panics: whatever s and now hold (time going backwards included),
	// it returns a valid decision.
	Step(s State, now int64, n int64) (State, floodgate.Decision)
}

// Layout is an optional interface of an [Algorithm]: the part of its [Spec]
// that a store needs on every call, returned in registers instead of the
// whole Spec by value. When an algorithm implements it, the values must be
// those of its Spec (Namespace, Words, MaxLog); stores that look for it may
// then skip the Spec call on their hot path.
type Layout interface {
	Layout() (namespace uint64, words, maxLog int)
}

// WordStepper is an optional interface of an [Algorithm] whose state is one
// word (Spec.Words == 1, Spec.MaxLog == 0). StepWord is Step on the state
// whose W[0] is w0 (every other word zero, no log): it returns the new W[0]
// and writes the decision to *d, which is the zero Decision on entry and is
// not kept after the call:
//
//	next, d := alg.Step(State{W: [MaxWords]int64{w0}}, now, n)
//	// next.W[0] == alg.StepWord(w0, now, n, &d2) and d == d2
//
// It exists for speed: the word travels in registers where a State goes
// through memory, and the decision is written once, in place, where a
// returned Decision (six words) would be spilled and copied at each call
// boundary, copies that stall the processor's store forwarding. A store may
// call either one; they must agree exactly.
type WordStepper interface {
	StepWord(w0, now, n int64, d *floodgate.Decision) int64
}

// StateStepper is an optional interface of an [Algorithm]: Step on state and
// decision memory that the caller owns, instead of by value. StepState does
// the same arithmetic as Step:
//
//	next, d := alg.Step(*s, now, n)
//	alg.StepState(s, now, n, &d2)
//	// then *s == next (words and log) and d2 == d
//
// It reads *s, writes the new state to *s in place and sets every field of
// *d (whatever *d held on entry). s and d point to memory the caller owns
// (a store's scratch, under the key's lock); the algorithm keeps neither
// pointer after the call. The rule of [State].Log holds as for Step: the
// new s.Log may share the input log's spare capacity, so the caller keeps
// only this one state stepped from that input.
//
// It exists for speed, like [WordStepper] for the one-word algorithms: a
// State (MaxWords words and a slice) and a Decision passed and returned by
// value are copied through memory at each call boundary. A store may call
// either one; they must agree exactly.
type StateStepper interface {
	StepState(s *State, now, n int64, d *floodgate.Decision)
}

// Store keeps per-key state and runs an algorithm's step on it atomically:
// concurrent Apply calls on one key are serialised, so every decision sees the
// state the previous one left. The store owns time: it reads its clock (or the
// server's) once per Apply.
//
// Implementations are safe for concurrent use.
type Store interface {
	// Apply runs alg's step with cost n on key's state and returns the
	// decision. An error means the store could not decide; the state is then
	// as if Apply had not been called, unless the error says otherwise.
	Apply(ctx context.Context, key string, alg Algorithm, n int64) (floodgate.Decision, error)
}

// Micros converts a time to Unix microseconds, the time unit of every
// Algorithm step.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Dur converts microseconds to a Duration, saturating instead of overflowing.
func Dur(us int64) time.Duration {
	const maxUs = int64(1<<63-1) / 1000
	switch {
	case us <= 0:
		return 0
	case us >= maxUs:
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us) * time.Microsecond
}

// Limiter binds an [Algorithm] to a [Store]: the keyed [floodgate.Limiter]
// every algorithm package returns. It validates the cost and hands the rest to
// the store. It is safe for concurrent use.
type Limiter struct {
	store   Store
	alg     Algorithm
	maxCost int64
}

// NewLimiter returns a Limiter running alg on s. maxCost is the largest cost
// one request may ask for (the burst): larger costs could never be admitted
// and are refused with [floodgate.ErrInvalidCost].
func NewLimiter(s Store, alg Algorithm, maxCost int64) (*Limiter, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", floodgate.ErrInvalidConfig)
	}
	if alg == nil {
		return nil, fmt.Errorf("%w: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	if sp.Words < 1 || sp.Words > MaxWords {
		return nil, fmt.Errorf("%w: algorithm %q uses %d words, want 1..%d", floodgate.ErrInvalidConfig, sp.Name, sp.Words, MaxWords)
	}
	if maxCost < 1 {
		return nil, fmt.Errorf("%w: max cost %d < 1", floodgate.ErrInvalidConfig, maxCost)
	}
	return &Limiter{store: s, alg: alg, maxCost: maxCost}, nil
}

// Algorithm returns the algorithm the limiter runs.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

// Store returns the store the limiter runs on.
func (l *Limiter) Store() Store { return l.store }

// Take implements [floodgate.Limiter].
func (l *Limiter) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if n < 1 || int64(n) > l.maxCost {
		return floodgate.Decision{}, costError(n, l.maxCost)
	}
	return l.store.Apply(ctx, key, l.alg, int64(n))
}

// Refund implements [floodgate.Refunder].
func (l *Limiter) Refund(ctx context.Context, key string, n int) error {
	if n < 1 || int64(n) > l.maxCost {
		return costError(n, l.maxCost)
	}
	_, err := l.store.Apply(ctx, key, l.alg, -int64(n))
	return err
}

// Peek reports the decision a request of cost n would get now, without
// consuming anything.
func (l *Limiter) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.store.Apply(ctx, key, l.alg, 0)
}

func costError(n int, maxCost int64) error {
	return fmt.Errorf("%w: cost %d outside 1..%d", floodgate.ErrInvalidCost, n, maxCost)
}
