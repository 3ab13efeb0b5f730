package algo

import "time"

// Grant is the outcome of a [Granter]'s step: how many units it took, or
// how long until it would.
type Grant struct {
	// Granted is how many units the step took: 0, or between least and
	// want.
	Granted int64
	// Wait is, when nothing was granted, the time in microseconds until
	// least units are there (0 when Granted > 0).
	Wait int64
	// Remaining is how many whole units are left after the step, between 0
	// and the capacity.
	Remaining int64
	// Reset is the time in microseconds until the state is back to full
	// after the step (0 when full).
	Reset int64
	// Shared says that the bucket was saturated (the members' demands add
	// up to more than its refill): Granted came from the member's share of
	// it, and the member's next share grows with the refill until it
	// claims again. Wait is then the time until that share holds a unit.
	Shared bool
}

// Granter is an optional interface of an [Algorithm] whose state is one
// word (Spec.Words == 1, Spec.MaxLog == 0) and which can hand out several
// units at once: the step that leases take (package lease). Grant takes as
// many of want units as there are, when at least least are there, and
// nothing otherwise; 1 <= least <= want <= Spec.Capacity (values outside
// are clamped into it). Like Step it reads no clock, normalises the state
// the same way and never panics:
//
//	next, g := alg.Grant(w0, now, want, least)
//
// After a grant of g.Granted units the state is exactly the one that
// g.Granted steps of cost 1 at now would leave, so a store and its Lua twin
// may mix grants, steps and refunds on one key.
//
// GrantLua is the twin: a Lua chunk that evaluates to
//
//	function(w, now, want, least, p) ... return w2, granted, wait, remaining, reset end
//
// where w is the word, now Unix microseconds, p the Spec's Lua.Params. It
// must return exactly what Grant returns, in integers below 2^53.
type Granter interface {
	Grant(w0, now, want, least int64) (int64, Grant)
	GrantLua() string
	// Refill is the rate at which the state regains units, per second
	// (a token bucket's rate).
	Refill() float64
}

// Claim is what a lease asks of a shared bucket in one grant
// (store/redisstore's Store.Grant): up to Want units, at least Least, for
// Member. A Claim with a Member also reports that member's demand, so
// that the store can divide a saturated bucket among the members that
// lease from it in proportion to their demands (Grant.Shared); a Claim
// without one is the algorithm's plain grant.
type Claim struct {
	// Want and Least bound the units asked: 1 <= Least <= Want.
	Want, Least int64
	// Member identifies the process that asks ("": none, a plain grant):
	// up to 64 ASCII letters, digits, '.', '_' and '-'.
	Member string
	// Demand is the member's demand on the key, in units per second,
	// admitted and refused alike (0 <= Demand < 2^32). A claim of Demand
	// 0 withdraws the member (a process that stops): it gets up to Want
	// units of what the store kept for it, nothing from the bucket
	// (Remaining and Reset 0), and the rest goes to the other members.
	Demand int64
	// Period is how long the member's report counts: a member not heard
	// from for a Period no longer shares the bucket, and what the store
	// kept for it goes to the next member that claims.
	Period time.Duration
}
