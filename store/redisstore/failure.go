package redisstore

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

type failMode uint8

const (
	modeError failMode = iota
	modeOpen
	modeClosed
	modeFallback
)

// FailurePolicy says what a [Store] does when Redis cannot decide (it is
// down, too slow for the per-decision timeout, or answered an error). Build
// one with [FailError], [FailOpen], [FailClosed], [Fallback] or
// [FallbackWith] and pass it to [WithFailurePolicy]. The zero value is
// [FailError].
//
// While Redis is reachable, every call tries Redis first. The store stops
// sending after a connection error (a refused dial, a reset or closed
// connection) and after a stall: a call that timed out ([WithTimeout])
// while Redis answered no call of the store from the moment it was sent
// (to within 1ms): a stopped or swamped server, a partition that drops
// packets. A call that times out while other calls are answered (one slow
// call on a busy, healthy Redis) does not stop it. Once it stops, calls go
// straight to the policy, without waiting, with a cause wrapping
// [floodgate.ErrStoreUnavailable]; only the calls already in flight wait
// out their timeout. A probe, one PING at a time on a goroutine of its own
// (bounded by the timeout), goes 5ms after the failure, then after a
// back-off doubling up to 50ms, when calls come in; the store sends again
// as soon as Redis answers the probe or a call still in flight. The store
// thus makes at most about 20 connection attempts per second while Redis
// is down, however many calls it gets, and goes back to Redis within about
// 50ms of Redis answering again. The rule is per store, not per node: on a
// Cluster whose other masters answer, the calls on a stalled master's slots
// wait out their timeout. A context that the caller cancelled (or whose
// deadline passed) is not a Redis failure: the call then returns the
// context's error under every policy, and tells the store nothing about
// Redis (with caller deadlines shorter than the timeout, a stall is
// therefore never detected: keep [WithTimeout] below them).
type FailurePolicy struct {
	mode       failMode
	retryAfter time.Duration
	local      store.Store
	derive     func(algo.Algorithm) (algo.Algorithm, error)
	divided    bool // Fallback: the local copy divides the rate by nodes
	nodes      int
}

// FailError is the default policy: Apply returns the zero Decision and an
// error wrapping [floodgate.ErrStoreUnavailable] (and the cause), and the
// caller's fail mode (for example the HTTP middleware's) decides. Nothing is
// reported to the observer: the caller reports what it did.
func FailError() FailurePolicy { return FailurePolicy{mode: modeError} }

// FailOpen admits every request Redis could not decide: Apply returns an
// allowed Decision (Limit is the policy's capacity, Remaining 0, no
// RetryAfter) and a nil error, and reports [floodgate.OutcomeErrorOpen] with
// the cause to the observer.
func FailOpen() FailurePolicy { return FailurePolicy{mode: modeOpen} }

// FailClosed denies every request Redis could not decide: Apply returns a
// denied Decision with RetryAfter = retryAfter (1s when retryAfter <= 0) and
// a nil error, and reports [floodgate.OutcomeErrorClosed] with the cause to
// the observer. Refunds (negative costs) are reported as allowed: there is
// nothing to deny.
func FailClosed(retryAfter time.Duration) FailurePolicy {
	if retryAfter <= 0 {
		retryAfter = time.Second
	}
	return FailurePolicy{mode: modeClosed, retryAfter: retryAfter}
}

// Fallback decides locally, on local (typically a memstore), when Redis
// cannot: every algorithm runs with its rate divided by nodes, the number of
// processes that share the global limit, so that the fleet as a whole stays
// near the global rate while Redis is away. The decision is reported as
// [floodgate.OutcomeFallback] with the local verdict and the Redis error.
//
// The division is exact and works for every algorithm: the local copy runs
// on a clock that goes nodes times slower, so every refill, leak and window
// takes nodes times longer (a token bucket of 100/s becomes 100/(nodes s); a
// window of 60 per minute becomes 60 per nodes minutes). Capacities (burst,
// window size) are not divided: right after Redis fails each node may admit
// one burst. Use [FallbackWith] to pick the local configuration yourself.
//
// The local state is separate from the Redis one: while Redis is away the
// local limits start full.
//
// nodes must be at least 1: [New] refuses the policy otherwise.
func Fallback(local store.Store, nodes int) FailurePolicy {
	return FailurePolicy{mode: modeFallback, local: local, divided: true, nodes: nodes, derive: func(a algo.Algorithm) (algo.Algorithm, error) {
		return slowed(a, max(nodes, 1)), nil
	}}
}

// FallbackWith decides locally, on local, when Redis cannot, running the
// algorithm derive returns for each Redis algorithm (called once per
// algorithm, when the store first sees it). For example, to give each of 4
// nodes a quarter of the rate and of the burst:
//
//	redisstore.FallbackWith(mem, func(a algo.Algorithm) (algo.Algorithm, error) {
//		return bucket.Config{Rate: floodgate.PerSecond(25), Burst: 5}.Algorithm()
//	})
func FallbackWith(local store.Store, derive func(algo.Algorithm) (algo.Algorithm, error)) FailurePolicy {
	return FailurePolicy{mode: modeFallback, local: local, derive: derive}
}

func (fp FailurePolicy) validate() error {
	if fp.mode == modeFallback {
		if nilcheck.Is(fp.local) {
			return fmt.Errorf("%w: redisstore: fallback store is nil", floodgate.ErrInvalidConfig)
		}
		if fp.derive == nil {
			return fmt.Errorf("%w: redisstore: fallback derive function is nil", floodgate.ErrInvalidConfig)
		}
		if fp.divided && fp.nodes < 1 {
			return fmt.Errorf("%w: redisstore: fallback node count %d < 1", floodgate.ErrInvalidConfig, fp.nodes)
		}
	}
	return nil
}

// slowed returns alg running on a clock nodes times slower than the real one:
// every rate of alg divided by nodes, every capacity unchanged, and the
// durations of its decisions in real time. It is the local algorithm of
// [Fallback]. State.W[0] stays in real time (the store may still drop full
// states); the other words are in the slowed time and must only be stepped
// by the returned algorithm. slowed(alg, 1) is alg. Its Spec has no Lua twin
// and a namespace of its own.
func slowed(alg algo.Algorithm, nodes int) algo.Algorithm {
	if nodes <= 1 {
		return alg
	}
	sp := alg.Spec()
	h := fnv.New64a()
	fmt.Fprintf(h, "slowed/%d/%d", nodes, sp.Namespace)
	sp.Namespace = h.Sum64()
	sp.Name += "-slowed"
	sp.Lua = algo.Lua{}
	return slowedAlg{inner: alg, spec: sp, n: int64(nodes), origin: floodgate.Nanotime() / 1000}
}

type slowedAlg struct {
	inner     algo.Algorithm
	spec      algo.Spec
	n, origin int64
}

func (a slowedAlg) Spec() algo.Spec { return a.spec }

// in maps real time to slowed time; out maps back (out(in(t)) <= t <
// out(in(t)+1), so "full at or before now" means the same in both).
func (a slowedAlg) in(t int64) int64 {
	d := t - a.origin
	q := d / a.n
	if d%a.n != 0 && d < 0 {
		q--
	}
	return a.origin + q
}

func (a slowedAlg) out(t int64) int64 { return a.origin + (t-a.origin)*a.n }

func (a slowedAlg) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	if s.W[0] != 0 {
		s.W[0] = a.in(s.W[0])
	}
	s, d := a.inner.Step(s, a.in(now), n)
	if s.W[0] != 0 {
		s.W[0] = a.out(s.W[0])
	}
	d.RetryAfter = a.scale(d.RetryAfter)
	d.ResetAfter = a.scale(d.ResetAfter)
	d.Delay = a.scale(d.Delay)
	return s, d
}

func (a slowedAlg) scale(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	if d > time.Duration(1<<63-1)/time.Duration(a.n) {
		return time.Duration(1<<63 - 1)
	}
	return d * time.Duration(a.n)
}
