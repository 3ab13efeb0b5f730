package bucket

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
)

// Limit is a rate of events per second, as in golang.org/x/time/rate. A zero
// Limit allows no events beyond the burst the limiter holds.
type Limit float64

// Inf is the infinite rate: every event is allowed, whatever the burst.
const Inf = Limit(math.MaxFloat64)

// InfDuration is the delay a [Reservation] reports when it is not OK.
const InfDuration = time.Duration(math.MaxInt64)

// Every converts a minimum interval between events to a Limit. A zero or
// negative interval gives [Inf].
func Every(interval time.Duration) Limit {
	if interval <= 0 {
		return Inf
	}
	return 1 / Limit(interval.Seconds())
}

// Limiter is a keyless token bucket for caller-side throttling: a bucket of
// Burst tokens, full at the start, refilled at Limit tokens per second. Its
// methods mirror golang.org/x/time/rate's Limiter (see the package
// documentation for where they differ, and why).
//
// Pick the method by what a denied caller should do: Allow drops the event,
// Reserve tells how long to wait and lets the caller decide, Wait blocks. The
// N variants take n tokens at once; the ones with a time.Time take the time
// explicitly instead of reading floodgate's monotonic clock.
//
// Limiter is safe for concurrent use. Allow, AllowN, Reserve, ReserveN, Wait,
// WaitN, Tokens and the Reservation methods take no lock: the bucket's state
// is one atomic word. The setters serialise among themselves.
//
// The zero value is a valid Limiter that rejects every event (limit 0,
// burst 0). A Limiter must not be copied after first use.
type Limiter struct {
	p  atomic.Pointer[params]
	mu sync.Mutex // serialises the writers of p: the setters and re-basing
}

// kind is how a params generation keeps its state word.
type kind uint8

const (
	// kindRate: GCRA; the word holds the theoretical arrival time (TAT) as a
	// float64 of nanoseconds relative to params.base: the time at which the
	// bucket is full again. Tokens at time x: burst - max(TAT-x, 0)/interval.
	kindRate kind = iota
	// kindZero: no refill (limit 0); the word holds the token count (float64,
	// negative while reservations are outstanding).
	kindZero
	// kindInf: everything is allowed; the word is unused.
	kindInf
)

// params is one immutable generation of a Limiter's configuration, plus the
// state word that belongs to it. A setter freezes the word of the current
// generation, converts its state, and publishes a new generation: a CAS on a
// retired word can never succeed, so no decision is ever taken against a
// configuration that is no longer current.
type params struct {
	state atomic.Uint64
	// last is the latest time (limiter clock) at which tokens were taken:
	// the present, as far as the limiter knows. A cancel or a setter with an
	// older time is taken as happening at last, so that it cannot give back
	// tokens that were refilled and spent since (a credit counted twice).
	// Keeping it costs a second atomic write per charge, so it is kept only
	// once track is set: by the first reservation (before its CAS, so that
	// every charge after it is seen) and by the first setter. Charges before
	// any reservation cannot make one's cancel credit twice.
	last  atomic.Int64
	track atomic.Bool

	kind     kind
	limit    Limit
	burst    int
	interval float64 // kindRate: nanoseconds per token

	// base is the time (limiter clock, ns) the TAT is relative to. Keeping the
	// TAT near zero keeps its float64 precision far below a nanosecond; the
	// limiter re-bases when a time falls outside [rebaseBefore, rebaseAfter].
	base, rebaseBefore, rebaseAfter int64

	since   int64   // time of the setter call that made this generation
	gen     uint64  // bumped by every setter (not by re-basing)
	infDebt float64 // kindInf: tokens missing from the burst at since

	retired chan struct{} // closed when this generation is replaced
}

const (
	// frozen marks the state word of a retired generation. It is a NaN, which
	// no valid state ever is.
	frozen = ^uint64(0)
	// rebaseSpan: how far (ns, about 18 minutes) a time may be from base before
	// the limiter re-bases; below it a float64 TAT is exact to 2^-12 ns.
	rebaseSpan = int64(1) << 40
	// maxAbs bounds every time on the limiter clock (about 146 years from
	// process start) so that no subtraction of two times overflows.
	maxAbs = int64(1)<<62 - 1
	// maxWait: waits of 2^63 ns (292 years) or more cannot be represented.
	maxWait = float64(1 << 63)
	// maxInterval: limits slower than one token per 1e250 ns (1e-241 per
	// second) are treated as 0, so that burst x interval stays finite.
	maxInterval = 1e250
)

// The limiter clock is monotime.Nanotime() shifted to the time this package
// was initialised; explicit times are mapped onto it through epoch, using the
// monotonic reading when they carry one. epoch is taken between two readings
// around epochNano so that both mappings agree to a few nanoseconds.
var epoch, epochNano = func() (time.Time, int64) {
	a := time.Now()
	n := monotime.Nanotime()
	b := time.Now()
	return a.Add(b.Sub(a) / 2), n
}()

// clockNow reads floodgate's monotonic clock on the limiter's time scale.
func clockNow() int64 { return monotime.Nanotime() - epochNano }

// toNS maps t onto the limiter clock, saturating far from the present.
func toNS(t time.Time) int64 {
	d := int64(t.Sub(epoch)) // Sub saturates instead of overflowing
	return min(max(d, -maxAbs), maxAbs)
}

func f64(bits uint64) float64 { return math.Float64frombits(bits) }
func u64(f float64) uint64    { return math.Float64bits(f) }

// newParams builds a generation of limit r and burst b at time now, with
// debt tokens missing from a full bucket (debt >= 0).
func newParams(r Limit, b int, now int64, debt float64, gen uint64, since int64) *params {
	p := &params{
		limit:        r,
		burst:        max(b, 0),
		base:         now,
		rebaseBefore: math.MinInt64,
		rebaseAfter:  math.MaxInt64,
		since:        since,
		gen:          gen,
		retired:      make(chan struct{}),
	}
	p.last.Store(-maxAbs)
	switch {
	case !(r > 0): // zero, negative, NaN
		p.limit, p.kind = 0, kindZero
	case r >= Inf: // Inf and +Inf
		p.limit, p.kind = Inf, kindInf
	default:
		p.kind, p.interval = kindRate, 1e9/float64(r)
		if p.interval > maxInterval {
			p.kind, p.interval = kindZero, 0
		}
	}
	switch p.kind {
	case kindRate:
		p.rebaseBefore, p.rebaseAfter = now-rebaseSpan, now+rebaseSpan
		tat := math.Inf(-1) // full at every time
		if debt > 0 {
			tat = debt * p.interval
		}
		p.state.Store(u64(tat))
	case kindZero:
		p.state.Store(u64(float64(p.burst) - debt))
	case kindInf:
		p.infDebt = debt
	}
	return p
}

// debtAt returns how many tokens the bucket misses at time now (>= 0; more
// than the burst while reservations are outstanding), given its state word.
func (p *params) debtAt(bits uint64, now int64) float64 {
	switch p.kind {
	case kindRate:
		if d := f64(bits) - relTime(now-p.base); d > 0 {
			return d / p.interval
		}
		return 0
	case kindZero:
		return float64(p.burst) - min(f64(bits), float64(p.burst))
	default:
		if now > p.since {
			return 0 // any time at an infinite rate refills the bucket
		}
		return p.infDebt
	}
}

// NewLimiter returns a Limiter that allows events at rate r with bursts of up
// to b tokens, starting full. A NaN or negative r is taken as 0, a rate of
// [Inf] or more (including +Inf) as Inf, and a negative b as 0.
func NewLimiter(r Limit, b int) *Limiter {
	l := &Limiter{}
	l.p.Store(newParams(r, b, clockNow(), 0, 0, -maxAbs))
	return l
}

// Limit returns the current rate in events per second.
func (l *Limiter) Limit() Limit {
	if p := l.p.Load(); p != nil {
		return p.limit
	}
	return 0
}

// Burst returns the current burst: the most tokens one call may take (unless
// the limit is Inf) and the bucket's capacity.
func (l *Limiter) Burst() int {
	if p := l.p.Load(); p != nil {
		return p.burst
	}
	return 0
}

// Tokens returns the number of tokens available now. It is never above the
// burst and is negative while reservations wait for their tokens.
func (l *Limiter) Tokens() float64 { return l.tokensAt(clockNow()) }

// TokensAt returns the number of tokens available at time t. A time before
// the last one the limiter saw sees the tokens of that earlier time: fewer,
// never more.
func (l *Limiter) TokensAt(t time.Time) float64 { return l.tokensAt(toNS(t)) }

func (l *Limiter) tokensAt(now int64) float64 {
	p, bits := l.current()
	if p == nil {
		return 0
	}
	return float64(p.burst) - p.debtAt(bits, now)
}

// current returns the current generation and its (unfrozen) state word.
func (l *Limiter) current() (*params, uint64) {
	p := l.p.Load()
	for p != nil {
		bits := p.state.Load()
		if bits != frozen {
			return p, bits
		}
		p = l.awaitSwap(p)
	}
	return nil, 0
}

// awaitSwap waits for a setter that froze p to publish the next generation.
// The setter does a few nanoseconds of arithmetic in between.
func (l *Limiter) awaitSwap(p *params) *params {
	for {
		runtime.Gosched()
		if q := l.p.Load(); q != p {
			return q
		}
	}
}

// Allow reports whether one event may happen now, and takes its token if so.
// It is AllowN(now, 1) on floodgate's monotonic clock.
func (l *Limiter) Allow() bool {
	now := clockNow()
	// The common case inline: take's decision for n = 1, maxDelay = 0, on a
	// finite limit within the span; anything else, or a lost CAS, goes
	// through take.
	if p := l.p.Load(); p != nil && p.kind == kindRate && p.burst >= 1 && now <= p.rebaseAfter && now >= p.rebaseBefore {
		if bits := p.state.Load(); bits != frozen {
			nowRel := float64(now - p.base)
			from := max(f64(bits), nowRel)
			if from-nowRel > float64(p.burst-1)*p.interval {
				return false // the token is not there yet
			}
			if p.track.Load() {
				p.advanceLast(now)
			}
			if p.state.CompareAndSwap(bits, u64(from+p.interval)) {
				return true
			}
		}
	}
	return l.take(now, 1, 0).st == granted
}

// AllowN reports whether n events may happen at time t, and takes their
// tokens if so. It returns false, taking nothing, when n is negative or
// larger than the burst (unless the limit is Inf). n == 0 is allowed unless
// reservations are waiting for tokens.
func (l *Limiter) AllowN(t time.Time, n int) bool {
	return l.take(toNS(t), n, 0).st == granted
}

// status is the outcome of take.
type status uint8

const (
	granted status = iota // tokens taken; act after delay
	refused               // n < 0, or n > burst: never possible
	tooLate               // possible, but only after more than maxDelay
	never                 // limit 0 with too few tokens, or a wait >= 2^63 ns
)

// grant is what take returns: no allocation on the Allow path.
type grant struct {
	st    status
	p     *params // the generation that decided
	act   float64 // kindRate: the exact time the tokens exist, relative to p.base
	delay int64   // ns from now until the tokens exist, rounded up
}

// take is the one decision: n tokens at time now, granted when they exist
// within maxDelay. It reads no clock: now is read once by the caller, and a
// now older than the state's own time simply sees fewer tokens (the TAT is an
// absolute schedule), so a late caller can never move the state back nor
// earn tokens twice.
func (l *Limiter) take(now int64, n int, maxDelay int64) grant {
	p := l.p.Load()
	for {
		if p == nil { // zero Limiter: limit 0, burst 0, no tokens
			if n == 0 {
				return grant{st: granted}
			}
			return grant{st: refused}
		}
		if n < 0 || (n > p.burst && p.kind != kindInf) {
			return grant{st: refused, p: p}
		}
		if p.kind == kindInf {
			return grant{st: granted, p: p}
		}
		bits := p.state.Load()
		if bits == frozen {
			p = l.awaitSwap(p)
			continue
		}
		if p.kind == kindZero {
			tokens := f64(bits)
			if tokens < float64(n) {
				return grant{st: never, p: p}
			}
			if n == 0 || p.state.CompareAndSwap(bits, u64(tokens-float64(n))) {
				return grant{st: granted, p: p}
			}
			continue
		}
		nowRel := float64(now - p.base) // exact within the span
		tat := f64(bits)
		if now > p.rebaseAfter || now < p.rebaseBefore {
			if now > p.rebaseAfter || tat <= nowRel {
				p = l.rebase(p, bits, now)
				continue
			}
			// Far behind the base with tokens owed: decide on the
			// caller's time rounded down (fewer tokens, never more).
			nowRel = relTime(now - p.base)
		}
		from := max(tat, nowRel)
		debt := from - nowRel // ns until full; exactly 0 when full
		// Waiting time before n tokens exist. Written so that a full bucket
		// gives wait <= 0 exactly for every n <= burst.
		wait := debt - float64(p.burst-n)*p.interval
		var delay int64
		if wait > 0 {
			if wait >= maxWait {
				return grant{st: never, p: p}
			}
			delay = int64(math.Ceil(wait))
			if delay > maxDelay {
				return grant{st: tooLate, p: p, delay: delay}
			}
		}
		newTat := from + float64(n)*p.interval
		if n > 0 {
			if maxDelay > 0 && !p.track.Load() {
				p.track.Store(true) // a reservation: keep last from now on
			}
			if p.track.Load() {
				p.advanceLast(now) // before the CAS: a cancel that sees the new state sees last
			}
		}
		if n == 0 || p.state.CompareAndSwap(bits, u64(newTat)) {
			return grant{st: granted, p: p, act: nowRel + max(wait, 0), delay: delay}
		}
	}
}

// advanceLast raises p.last to now.
func (p *params) advanceLast(now int64) {
	for {
		last := p.last.Load()
		if now <= last || p.last.CompareAndSwap(last, now) {
			return
		}
	}
}

// relTime converts a time relative to a base to float64, rounded down when
// it is too large to be exact, so that a caller's time never rounds later.
func relTime(d int64) float64 {
	f := float64(d)
	if f >= 0x1p63 || (f > -0x1p63 && int64(f) > d) {
		f = math.Nextafter(f, math.Inf(-1))
	}
	return f
}

func satSub(a, b int64) int64 {
	switch {
	case b < 0 && a > math.MaxInt64+b:
		return math.MaxInt64
	case b > 0 && a < math.MinInt64+b:
		return math.MinInt64
	}
	return a - b
}

// rebase moves generation p (kindRate) to base now, when now is far from its
// base: forward always (the TAT keeps its precision), backward only when the
// bucket is full at now. A bucket full at now becomes "full from now on"
// (exact, and stricter for any caller older than now); otherwise the TAT is
// shifted and rounded up by a bound on the float64 error, so that a rebase
// never credits anything. It returns the generation to retry with.
func (l *Limiter) rebase(p *params, bits uint64, now int64) *params {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p.Load() != p || !p.state.CompareAndSwap(bits, frozen) {
		return l.p.Load()
	}
	np := &params{
		kind: p.kind, limit: p.limit, burst: p.burst, interval: p.interval,
		base: now, rebaseBefore: now - rebaseSpan, rebaseAfter: now + rebaseSpan,
		since: p.since, gen: p.gen, retired: make(chan struct{}),
	}
	np.last.Store(p.last.Load())
	np.track.Store(p.track.Load())
	tat, d := f64(bits), float64(now-p.base)
	eps := (math.Abs(tat) + math.Abs(d)) * 0x1p-51 // bounds the rounding of d and of tat-d
	switch {
	case math.IsInf(tat, -1): // never charged: full at every time
	case tat+eps <= d:
		tat = 0
	default:
		tat = tat - d + eps
	}
	np.state.Store(u64(tat))
	l.install(p, np)
	return np
}

// freeze retires the current generation's state word (the caller holds mu)
// and returns the generation and its last state.
func (l *Limiter) freeze() (*params, uint64) {
	p := l.p.Load()
	if p == nil {
		return nil, 0
	}
	for {
		bits := p.state.Load()
		if p.state.CompareAndSwap(bits, frozen) {
			return p, bits
		}
	}
}

// install publishes np in place of old (the caller holds mu).
func (l *Limiter) install(old, np *params) {
	l.p.Store(np)
	if old != nil {
		close(old.retired)
	}
}

// SetLimit sets a new limit now. It is SetLimitAt on floodgate's clock.
func (l *Limiter) SetLimit(newLimit Limit) { l.reconfigure(clockNow(), newLimit, true, 0, false) }

// SetLimitAt sets a new limit at time t: the tokens gathered until t at the
// old limit are kept, and the bucket refills at the new limit from t on. A
// time before the previous setter's is taken as that time. Reservations
// already granted keep their times.
func (l *Limiter) SetLimitAt(t time.Time, newLimit Limit) {
	l.reconfigure(toNS(t), newLimit, true, 0, false)
}

// SetBurst sets a new burst now. It is SetBurstAt on floodgate's clock.
func (l *Limiter) SetBurst(newBurst int) { l.reconfigure(clockNow(), 0, false, newBurst, true) }

// SetBurstAt sets a new burst at time t. The tokens available at t are kept
// (capped at the new burst): a larger burst does not fill the bucket, the
// extra room refills at the limit. A negative burst is taken as 0.
func (l *Limiter) SetBurstAt(t time.Time, newBurst int) {
	l.reconfigure(toNS(t), 0, false, newBurst, true)
}

func (l *Limiter) reconfigure(now int64, limit Limit, setLimit bool, burst int, setBurst bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, bits := l.freeze()
	var (
		debt     float64
		gen      uint64
		oldBurst int
	)
	last := -maxAbs
	if old != nil {
		last = old.last.Load()
		now = max(now, old.since, last)
		debt, gen, oldBurst = old.debtAt(bits, now), old.gen+1, old.burst
		if !setLimit {
			limit = old.limit
		}
	}
	if !setBurst {
		burst = oldBurst
	}
	burst = max(burst, 0)
	// The tokens stay what they are, capped at the new burst.
	debt = max(debt+float64(burst-oldBurst), 0)
	np := newParams(limit, burst, now, debt, gen, now)
	np.last.Store(last)
	np.track.Store(true)
	l.install(old, np)
}

// Reservation holds tokens taken by [Limiter.Reserve] or
// [Limiter.ReserveN] for an event that may happen after a delay. It is safe
// for concurrent use.
type Reservation struct {
	ok        bool
	lim       *Limiter
	p         *params
	n         int
	act       float64 // kindRate: the exact time to act, relative to p.base
	at, delay int64   // when it was made, and its delay rounded up (ns)
	cancelled atomic.Bool
}

// Reserve is ReserveN(now, 1) on floodgate's clock.
func (l *Limiter) Reserve() *Reservation { return l.reserve(clockNow(), 1) }

// ReserveN takes n tokens at time t, whether or not they exist yet, and
// returns the Reservation that says when the event may happen. The
// Reservation is not OK, and nothing is taken, when n is negative, when n
// exceeds the burst (unless the limit is Inf), or when the tokens would never
// exist: limit 0 with too few tokens left, or a wait of 292 years or more.
//
// A caller that does not act must Cancel, so that the tokens go back.
func (l *Limiter) ReserveN(t time.Time, n int) *Reservation { return l.reserve(toNS(t), n) }

func (l *Limiter) reserve(now int64, n int) *Reservation {
	g := l.take(now, n, math.MaxInt64)
	r := &Reservation{lim: l}
	if g.st == granted {
		r.ok, r.p, r.n, r.act, r.at, r.delay = true, g.p, n, g.act, now, g.delay
	}
	return r
}

// OK reports whether the tokens were granted. When it is false, Delay
// returns [InfDuration] and Cancel does nothing.
func (r *Reservation) OK() bool { return r.ok }

// Delay is DelayFrom(now) on floodgate's clock.
func (r *Reservation) Delay() time.Duration { return r.delayFrom(clockNow()) }

// DelayFrom returns how long after t the reserved event may happen: zero
// means at once. Delays are whole nanoseconds rounded up, so that acting
// after the delay never runs ahead of the limit.
func (r *Reservation) DelayFrom(t time.Time) time.Duration { return r.delayFrom(toNS(t)) }

func (r *Reservation) delayFrom(now int64) time.Duration {
	if !r.ok {
		return InfDuration
	}
	// Kept as (at, delay) rather than at+delay, which could overflow.
	return time.Duration(max(satSub(r.delay, now-r.at), 0))
}

// Cancel is CancelAt(now) on floodgate's clock.
func (r *Reservation) Cancel() { r.cancelAt(clockNow()) }

// CancelAt gives back, at time t, the tokens of a reservation whose event has
// not happened (t is not after its time to act). It gives back what the
// reservation took, less what later reservations have been scheduled behind
// it (their times cannot move), never more, and never beyond the burst. Only
// the first Cancel counts; after SetLimit or SetBurst a reservation can no
// longer be cancelled (its tokens stay taken).
func (r *Reservation) CancelAt(t time.Time) { r.cancelAt(toNS(t)) }

func (r *Reservation) cancelAt(now int64) {
	if !r.ok || r.n == 0 || r.p.kind == kindInf || now-r.at > r.delay {
		return
	}
	if !r.cancelled.CompareAndSwap(false, true) {
		return
	}
	l := r.lim
	for {
		p, bits := l.current()
		if p.gen != r.p.gen {
			return
		}
		// Read after the state: an admit raises last before its CAS.
		if now = max(now, p.last.Load()); now-r.at > r.delay {
			return // the limiter has moved past its time to act: spent
		}
		var next float64
		if p.kind == kindZero {
			next = min(f64(bits)+float64(r.n), float64(p.burst))
		} else {
			nowRel := relTime(now - p.base)
			tat := f64(bits)
			// Later grants whose time to act lies beyond this one's were
			// scheduled behind it: their share cannot come back.
			act := r.act - float64(p.base-r.p.base) // on p's base
			behind := tat - float64(p.burst)*p.interval - act
			restore := float64(r.n)*p.interval - max(behind, 0)
			if !(restore > 0) {
				return
			}
			next = max(max(tat, nowRel)-restore, nowRel)
		}
		if p.state.CompareAndSwap(bits, u64(next)) {
			return
		}
	}
}

// Wait is WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n tokens are taken, or returns an error:
//   - n negative, or larger than the burst (unless the limit is Inf): an error
//     wrapping [floodgate.ErrInvalidCost];
//   - the context ends first: the context's error;
//   - the tokens would only exist after the context's deadline: at once, an
//     error wrapping [floodgate.ErrWouldExceedDeadline] (and so
//     [context.DeadlineExceeded]), without sleeping into the deadline.
//
// A wait that fails or is abandoned takes nothing: its reservation is
// cancelled (see [Reservation.CancelAt]). With a limit of 0 and too few
// tokens, WaitN waits for the context to end or for a setter to change the
// limiter, and then tries again.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if p := l.p.Load(); n < 0 || (p == nil && n > 0) || (p != nil && p.kind != kindInf && n > p.burst) {
		return fmt.Errorf("%w: WaitN(n=%d) with burst %d", floodgate.ErrInvalidCost, n, l.Burst())
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		maxDelay := int64(math.MaxInt64)
		deadline, hasDeadline := ctx.Deadline()
		if hasDeadline {
			maxDelay = max(int64(time.Until(deadline)), 0)
		}
		now := clockNow()
		g := l.take(now, n, maxDelay)
		switch g.st {
		case refused: // the burst shrank meanwhile
			return fmt.Errorf("%w: WaitN(n=%d) with burst %d", floodgate.ErrInvalidCost, n, l.Burst())
		case tooLate:
			return fmt.Errorf("%w: WaitN(n=%d) needs %v", floodgate.ErrWouldExceedDeadline, n, time.Duration(g.delay))
		case never:
			if hasDeadline {
				return fmt.Errorf("%w: WaitN(n=%d): limit %v, %v tokens", floodgate.ErrWouldExceedDeadline, n, g.p.limit, l.tokensAt(now))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-g.p.retired:
				continue
			}
		}
		if g.delay == 0 {
			return nil
		}
		timer := time.NewTimer(time.Duration(g.delay))
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			timer.Stop()
			r := Reservation{ok: true, lim: l, p: g.p, n: n, act: g.act, at: now, delay: g.delay}
			r.cancelAt(clockNow())
			return ctx.Err()
		}
	}
}
