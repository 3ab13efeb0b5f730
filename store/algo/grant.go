package algo

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
}
