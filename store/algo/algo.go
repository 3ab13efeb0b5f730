package algo

import (
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
	// Policy is the name the user gave the limit (e.g. "api-per-ip"), or ""
	// when none was given. It labels decisions for observers and headers.
	Policy string
	// Namespace is the 64-bit identity of the limit's state. Stores keep the
	// state of different namespaces apart, so that two limiters sharing a
	// store and a key never read each other's state. It derives from the
	// algorithm's Name and the Policy when one is given (so that a change of
	// parameters keeps the state), and is unique per construction otherwise
	// (see [Identity]).
	Namespace uint64
	// Words is how many words of State.W the algorithm uses (1..MaxWords).
	Words int
	// MaxLog is the most entries the algorithm keeps in State.Log; 0 when it
	// keeps none.
	MaxLog int
	// Capacity is the largest cost one request may have: the burst of a
	// token bucket, the limit of a window. Larger costs could never be
	// admitted. Capacity >= 1.
	Capacity int64
	// Undelayed is how many of Capacity's units pass from full without a
	// shaping delay: Capacity, except for a leaky bucket in delay mode. A
	// transport that refuses delayed requests advertises only these.
	Undelayed int64
	// Quota and Window describe the limit as a transport advertises it
	// (RateLimit-Policy q and w): Quota units per Window (a rate's N per
	// Per, a window's limit per its length).
	Quota  int64
	Window time.Duration
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
// returns: every arithmetic operation stays in integers below 2^53. No
// function of the chunk (the step, a Converter's convert, a Granter's
// grant) may modify p or op (a store may keep them from one call to the
// next),
// and the chunk's top level should only define functions: the Redis store
// runs it once, when it loads a function library, where Redis offers no
// libraries (math, string); a twin that calls one there runs as a script.
//
// The chunk of a [Converter] evaluates to two functions, the step and
//
//	function(s, now, op, p) ... return s2 end
//
// its convert: s is a state that the version of the algorithm with Params
// op left, and s2 is [Converter.Convert]'s state for it at now, for the
// version with Params p. op holds the first StateParams of that version's
// Params (a store keeps them beside the state); p is the caller's full
// Params.
type Lua struct {
	Source string
	Params []int64
	// StateParams is how many of the leading Params describe the state:
	// the version's parameters that a store keeps beside a state, for the
	// convert. The reserving twins append arguments of one call beyond
	// them. 0 means all of Params.
	StateParams int
}

// Algorithm is a rate-limiting policy in the form a store runs: a pure,
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
// those of its Spec (Words, MaxLog), its namespace in memory (the Spec's
// Namespace, or [VersionNamespace] of the Spec for a [Lineage], see
// [MemoryNamespace]) and its [Grain]; stores that look for it may then skip
// the Spec call on their hot path.
type Layout interface {
	Layout() (namespace uint64, words, maxLog int, grain int64)
}

// Grain is the time one unit of cost takes at the limit's rate, in
// microseconds: Spec.Window / Spec.Quota, rounded down (0 when either is
// not positive). A clock that lags by a small part of it moves the
// algorithm's decisions by that part of one unit; a store may pick its time
// source by it (see package memstore).
func Grain(sp Spec) int64 {
	w := sp.Window.Microseconds()
	if w <= 0 || sp.Quota <= 0 {
		return 0
	}
	return w / sp.Quota
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
// boundary. A store may call either one; they must agree exactly.
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
// It exists for speed, like [WordStepper]. A store may call either one; they
// must agree exactly.
type StateStepper interface {
	StepState(s *State, now, n int64, d *floodgate.Decision)
}
