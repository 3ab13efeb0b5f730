package redisstore

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
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
	divided    bool // Fallback: the local copy divides the limit by nodes
	nodes      int
}

// FailError is the default policy: Apply returns the zero Decision and an
// error wrapping [floodgate.ErrStoreUnavailable] (and the cause), and the
// caller's fail mode (for example the HTTP middleware's) decides. Nothing is
// reported to the observer: the caller reports what it did.
func FailError() FailurePolicy { return FailurePolicy{mode: modeError} }

// FailOpen admits every request Redis could not decide: Apply returns an
// allowed Decision with Fallback set and Limit, Remaining and RetryAfter 0
// (a blanket answer has no quota to advertise; see
// [floodgate.Decision.Fallback]), ApplyAll one such Decision per op, and a
// nil error; it reports [floodgate.OutcomeErrorOpen] with the cause to the
// observer.
func FailOpen() FailurePolicy { return FailurePolicy{mode: modeOpen} }

// FailClosed denies every request Redis could not decide: Apply (and
// ApplyAll, for each op) returns a denied Decision with Fallback set, Limit
// 0 and RetryAfter = retryAfter (1s when retryAfter <= 0) and a nil error,
// and reports [floodgate.OutcomeErrorClosed] with the cause to the
// observer. Refunds (negative costs) are reported as allowed: there is
// nothing to deny.
func FailClosed(retryAfter time.Duration) FailurePolicy {
	if retryAfter <= 0 {
		retryAfter = time.Second
	}
	return FailurePolicy{mode: modeClosed, retryAfter: retryAfter}
}

// Fallback decides locally, on local (typically a memstore), when Redis
// cannot, with every limit divided by nodes, the number of processes that
// share the global limit, so that the fleet as a whole stays near the
// global limit while Redis is away. The decision is reported as
// [floodgate.OutcomeFallback] with the local verdict and the Redis error.
//
// The rule, for every algorithm (token bucket, leaky bucket, windows):
//
//   - Rate and capacity are both divided by nodes. Each request costs nodes
//     units of the global algorithm run locally: a token bucket of 100/s
//     with a burst of 40 becomes 25/s with a burst of 10 on each of 4
//     nodes; a window of 60 per minute becomes 15 per minute. A capacity
//     smaller than nodes cannot be divided below one request: each request
//     then costs the whole capacity and the local clock runs
//     nodes/capacity times slower, so the rate is still divided by nodes
//     (a burst of 2 on 4 nodes: 1 request per node, refilled at a quarter
//     of the rate).
//   - A request whose cost is more than a node's share (cost x nodes above
//     the capacity) needs the node's whole share: it passes only when the
//     local limit is full, and then empties it.
//   - The local limits do not start full at the switch (the moment the
//     store began to decide locally: its first local decision after the
//     store's breaker opened, or after at least one local time-to-full,
//     and a second, without any), since a limit that fails
//     in a storm is most likely drained, and a full burst on every node is
//     an over-admission of the whole fleet. Every key starts as it would
//     stand after an even pace at its limit: a token or leaky bucket
//     drained (it admits from its first local token, nodes/rate after the
//     switch), a window with the elapsed share of its current window
//     taken (a window of 60 per minute on 4 nodes, 30 seconds into the
//     minute: 7 more in that minute). A bucket left from an earlier
//     outage holds no more than one drained at the switch: the tokens it
//     regained while Redis decided are not spent twice. The price: a key that was idle
//     before the outage starts so too (a first request may be refused,
//     with a RetryAfter of nodes/rate); a key first seen a local
//     time-to-full after the switch starts full.
//
// So over any stretch of an outage a fleet of nodes processes, each with
// Fallback(local, nodes), admits at most what one global limit could (its
// rate over the stretch plus its capacity; plus nodes requests when the
// capacity is smaller than nodes), and no burst at the switch. Requests
// costing more than a node's share are the exception: each takes one whole
// share. Measured (TestFleetFallbackHoldsTheLimit): 4 nodes offered 3x a
// token bucket of 200/s admit 196 and 200 in the two seconds after Redis
// is killed, with no error. The local state is separate from the
// Redis one and is not carried back when Redis answers again. Decisions
// report the local limit (Limit and Remaining in requests of the node's
// share; RetryAfter, ResetAfter and Delay in real time). Use
// [FallbackWith] to pick the local configuration yourself.
//
// nodes must be at least 1: [New] refuses the policy otherwise. With one
// node only the drained start applies.
func Fallback(local store.Store, nodes int) FailurePolicy {
	return FailurePolicy{mode: modeFallback, local: local, divided: true, nodes: nodes, derive: func(a algo.Algorithm) (algo.Algorithm, error) {
		return divided(a, max(nodes, 1)), nil
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

// divided returns alg divided among nodes, the local algorithm of
// [Fallback] (see its doc for the rule): each unit costs m = min(nodes,
// capacity) units of alg, on a clock nodes/m times slower than the real
// one, and a state full at the switch (a fresh key included) is replaced
// by the state it starts with ([dividedAlg.start]). State.W[0] stays in
// real time (the store may still drop full states); the other words are in
// the slowed time and must only be stepped by the returned algorithm. Its
// Spec has no Lua twin and a namespace of its own.
func divided(alg algo.Algorithm, nodes int) algo.Algorithm {
	sp := alg.Spec()
	n := int64(max(nodes, 1))
	m := min(n, sp.Capacity)
	g := gcd(n, m)
	a := &dividedAlg{inner: alg, m: m, num: n / g, den: m / g, capacity: sp.Capacity, origin: monotime.Nanotime() / 1000}
	h := fnv.New64a()
	fmt.Fprintf(h, "divided/%d/%d", nodes, sp.Namespace)
	sp.Namespace = h.Sum64()
	sp.Name += "-divided"
	sp.Lua = algo.Lua{}
	sp.Capacity = max(1, sp.Capacity/m)
	if sp.Undelayed > 0 {
		sp.Undelayed = max(1, sp.Undelayed/m)
	}
	a.spec = sp
	a.bucket = strings.HasPrefix(sp.Name, "token-bucket") || strings.HasPrefix(sp.Name, "leaky-bucket")
	_, d := alg.Step(algo.State{}, a.origin, a.capacity)
	a.rearm = max(int64(a.scale(d.ResetAfter)/time.Microsecond), int64(time.Second/time.Microsecond))
	return a
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// dividedAlg is [divided]'s algorithm. Its clock maps real time t to
// origin + (t-origin)*den/num.
type dividedAlg struct {
	inner              algo.Algorithm
	spec               algo.Spec
	m                  int64 // inner units per unit
	num, den           int64 // the clock runs num/den times slower
	capacity           int64 // the inner capacity
	origin             int64
	bucket             bool         // a token or leaky bucket: starts drained
	rearm              int64        // µs without a local step that make the next one a switch
	switchAt, lastStep atomic.Int64 // real µs
	// trips counts the openings of the store's breaker (nil: none known);
	// seenTrips is the count at the latest local step. An opening since
	// that step is a switch of its own: the local states then sat idle
	// while Redis decided, whatever the time since.
	trips     *atomic.Int64
	seenTrips atomic.Int64
}

func (a *dividedAlg) Spec() algo.Spec { return a.spec }

// in maps real time to slowed time; out maps back (out(in(t)) <= t <
// out(in(t)+1), so "full at or before now" means the same in both).
func (a *dividedAlg) in(t int64) int64 { return a.origin + floorDiv((t-a.origin)*a.den, a.num) }

func (a *dividedAlg) out(t int64) int64 { return a.origin - floorDiv(-(t-a.origin)*a.num, a.den) }

func floorDiv(x, y int64) int64 {
	q := x / y
	if x%y != 0 && x < 0 {
		q--
	}
	return q
}

// switched returns the time of the switch to local decisions that now
// belongs to: now itself when no local step ran for a.rearm, or when the
// store's breaker opened since the latest local step.
func (a *dividedAlg) switched(now int64) int64 {
	last := a.lastStep.Swap(now)
	tripped := false
	if a.trips != nil {
		t := a.trips.Load()
		tripped = a.seenTrips.Swap(t) != t
	}
	if last == 0 || now-last > a.rearm || tripped {
		a.switchAt.Store(now)
		return now
	}
	return a.switchAt.Load()
}

func (a *dividedAlg) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	if sw := a.switched(now); s.W[0] <= sw {
		// Full at the switch (or fresh): as it starts at the switch instead.
		s = a.start(sw)
	} else {
		s.W[0] = a.in(s.W[0])
		if a.bucket {
			// A bucket stepped locally before the switch and refilled since
			// holds no more than one drained at the switch (a state stepped
			// after the switch never does).
			if st := a.start(sw); st.W[0] > s.W[0] {
				s = st
			}
		}
	}
	cost := n * a.m
	if n > a.capacity/a.m {
		cost = a.capacity // more than a node's share: all of it
	}
	s, d := a.inner.Step(s, a.in(now), cost)
	if s.W[0] != 0 {
		s.W[0] = a.out(s.W[0])
	}
	d.Limit /= a.m
	d.Remaining /= a.m
	d.RetryAfter = a.scale(d.RetryAfter)
	d.ResetAfter = a.scale(d.ResetAfter)
	d.Delay = a.scale(d.Delay)
	return s, d
}

// start returns the state a key starts with at the switch sw, in the
// slowed time: a bucket's drained; a window's charged with the share of the
// window (epoch-aligned) elapsed at sw, what an even pace at the limit
// would have taken.
func (a *dividedAlg) start(sw int64) algo.State {
	t := a.in(sw)
	charge := a.capacity
	if !a.bucket {
		w := int64(a.spec.Window / time.Microsecond)
		if w <= 0 {
			return algo.State{}
		}
		charge = int64(float64(a.capacity) * float64(t%w) / float64(w))
		if charge <= 0 {
			return algo.State{}
		}
	}
	s, _ := a.inner.Step(algo.State{}, t, charge)
	return s
}

// scale turns a slowed duration into real time, rounded up.
func (a *dividedAlg) scale(d time.Duration) time.Duration {
	if d <= 0 || a.num == a.den {
		return d
	}
	if d > time.Duration(1<<63-1)/time.Duration(a.num) {
		return time.Duration(1<<63 - 1)
	}
	return (d*time.Duration(a.num) + time.Duration(a.den) - 1) / time.Duration(a.den)
}
