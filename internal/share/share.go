// Package share divides a saturated shared bucket among the processes that
// lease from it, in proportion to their demand: the step behind
// [algo.Claim] (package lease asks, store/redisstore runs it in Redis).
// Divide is the Go step; Lua is its twin, which redisstore embeds in its
// grant program. Both use the same double-precision operations in the same
// order, so that they agree to the unit.
//
// # The board
//
// A key that is leased has, beside its bucket, a board: one line per
// member (a process), "id demand expires pool\n", with the member's demand
// in units per second, the time its report expires (µs) and its pool, in
// thousandths of a unit: tokens already debited from the bucket and
// reserved for the member. A claim updates its member's line and drops
// the lines that expired, whose pools are spread over the pools of the
// members left in proportion to their demands (they were debited: nobody
// may spend them twice, and nothing is lost).
//
// # Calm and saturated
//
// When the members' demands add up to at most the bucket's refill, a claim
// is a plain grant (want, at least least), topped up from the member's
// pool. Above it, the bucket is saturated: each claim takes every whole
// unit the bucket holds and spreads it over the members' pools in
// proportion to their demands (the rounding remainder to the claimant),
// then hands its member up to want units from its own pool, whatever
// least says. Each member thus gets refill x demand / total demand, as
// one bucket fed every member's requests would give it, and a member that
// claims once per period takes its share of the whole period in one call.
package share

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/store/algo"
)

// clockID names the board's clock line, "~ 0 full 0": full is when the
// bucket, emptied by the last spread, is full again (µs). A bucket full
// before now (its word, the time it is full at; or full's, when the store
// dropped a full bucket's word) lost to its capacity the refill that came
// after; the next spread credits it, for at most a third of the claim's
// period, so that claims later than the bucket takes to fill (a small
// burst, a loaded node) do not lose the refill. '~' is no member's name.
const clockID = "~"

// milli is the pool's unit: a thousandth of a unit.
const milli = 1000

// saturation is the part of the refill above which the members' demands
// divide the bucket (the Lua twin writes it as 0.9): a little below the
// refill, so that a fleet whose demand hovers around the limit shares it
// rather than racing for each refill.
const saturation = 0.9

// everything is the want of a claim that takes every unit a bucket holds
// (a Granter clamps it to its capacity); exact in a Lua number.
const everything = 1 << 50

// member is one line of a board.
type member struct {
	id                string
	demand, exp, pool int64
}

// Divide runs one claim c at now (µs) on the bucket word w of g and the
// board, and returns the new word, the new board and the grant. A claim
// without a Member is g's plain grant and leaves the board as it is.
func Divide(g algo.Granter, w, now int64, board string, c algo.Claim) (int64, string, algo.Grant, error) {
	if c.Member == "" {
		w, out := g.Grant(w, now, c.Want, c.Least)
		return w, board, out, nil
	}
	ms, err := parse(board)
	if err != nil {
		return w, board, algo.Grant{}, err
	}
	refill := g.Refill()
	ms, me, orphan := join(ms, c, now, int64(c.Period/time.Microsecond))
	if c.Demand == 0 {
		take := min(c.Want, ms[me].pool/milli)
		return w, withdraw(ms, me, orphan, take), algo.Grant{Granted: take}, nil
	}
	var total int64
	for _, m := range ms {
		total += m.demand
	}
	spread(ms, me, orphan, total)
	var out algo.Grant
	if total > 0 && float64(total) > saturation*refill {
		w, ms, out = saturated(g, w, now, ms, me, total, c, refill)
	} else {
		w, out = calm(g, w, now, &ms[me], c)
	}
	return w, format(ms), out, nil
}

// join drops the expired lines and updates or appends the claimant's; it
// returns the lines, the claimant's index and what the dropped pools held.
func join(ms []member, c algo.Claim, now, ttl int64) ([]member, int, int64) {
	var orphan int64
	kept := ms[:0]
	for _, m := range ms {
		if m.id != c.Member && m.id != clockID && m.exp <= now {
			orphan += m.pool
			continue
		}
		kept = append(kept, m)
	}
	me := -1
	for i := range kept {
		if kept[i].id == c.Member {
			me = i
		}
	}
	if me < 0 {
		kept = append(kept, member{id: c.Member})
		me = len(kept) - 1
	}
	kept[me].demand = c.Demand
	kept[me].exp = now + ttl
	return kept, me, orphan
}

// withdraw removes the claimant me, which takes take units of its pool,
// from the board: what else the pool held (and the orphans) is spread
// over the members left. It returns the new board.
func withdraw(ms []member, me int, orphan, take int64) string {
	rest := orphan + ms[me].pool - take*milli
	ms = append(ms[:me], ms[me+1:]...)
	if len(ms) > 0 {
		var total int64
		for _, x := range ms {
			total += x.demand
		}
		spread(ms, 0, rest, total)
	}
	return format(ms)
}

// spread adds units (thousandths) to the pools in proportion to the
// demands (total their sum); the rounding remainder goes to the member of
// the largest demand (the first of them). With no demand on the board
// (the last member withdrew) the units are dropped. (Given to the claimant, it would favour the members that claim most
// often: a hundred light nodes over one heavy one.)
func spread(ms []member, me int, units, total int64) {
	if units <= 0 || total <= 0 {
		return // no member to give to: dropped
	}
	var given int64
	{
		for i := range ms {
			add := min(int64(math.Floor(float64(units)*float64(ms[i].demand)/float64(total))), units-given)
			ms[i].pool += add
			given += add
			if ms[i].demand > ms[me].demand {
				me = i
			}
		}
	}
	ms[me].pool += units - given
}

// calm is the grant of an unsaturated bucket, topped up from the pool.
func calm(g algo.Granter, w, now int64, m *member, c algo.Claim) (int64, algo.Grant) {
	w, out := g.Grant(w, now, c.Want, c.Least)
	if extra := min(c.Want-out.Granted, m.pool/milli); extra > 0 {
		m.pool -= extra * milli
		out.Granted += extra
		out.Wait = 0
	}
	return w, out
}

// saturated spreads what the bucket holds over the pools and hands the
// claimant its pool, up to c.Want.
func saturated(g algo.Granter, w, now int64, ms []member, me int, total int64, c algo.Claim, refill float64) (int64, []member, algo.Grant) {
	clk := -1
	for i := range ms {
		if ms[i].id == clockID {
			clk = i
		}
	}
	if clk < 0 {
		ms = append(ms, member{id: clockID})
		clk = len(ms) - 1
	}
	var extra int64
	if full := ms[clk].exp; full > 0 && w < now {
		from := max(w, full, now-int64(c.Period/time.Microsecond)/3)
		if from < now {
			extra = int64(math.Floor(float64(now-from) * refill / 1000))
		}
	}
	w, all := g.Grant(w, now, everything, 1)
	spread(ms, me, all.Granted*milli+extra, total)
	ms[clk].exp = now + all.Reset
	m := &ms[me]
	take := min(c.Want, m.pool/milli)
	m.pool -= take * milli
	out := algo.Grant{Granted: take, Remaining: all.Remaining, Reset: all.Reset, Shared: true}
	if take == 0 {
		out.Wait = waitFor(m, total, refill, now)
	}
	return w, ms, out
}

// waitFor is the time (µs) until m's pool holds a whole unit at its share
// of the refill.
func waitFor(m *member, total int64, refill float64, now int64) int64 {
	if m.demand <= 0 || !(refill > 0) {
		return m.exp - now
	}
	x := math.Ceil(float64(milli-m.pool) * 1000 * float64(total) / (refill * float64(m.demand)))
	return int64(min(x, 1e15))
}

func parse(board string) ([]member, error) {
	var ms []member
	for line := range strings.Lines(board) {
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("share: malformed board line %q", line)
		}
		var v [3]int64
		for i := range v {
			x, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("share: malformed board line %q", line)
			}
			v[i] = x
		}
		ms = append(ms, member{id: f[0], demand: v[0], exp: v[1], pool: v[2]})
	}
	return ms, nil
}

func format(ms []member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s %d %d %d\n", m.id, m.demand, m.exp, m.pool)
	}
	return b.String()
}

// Pooled is what board's pools hold, in whole units (rounded down): the
// tokens debited from the bucket and not yet handed to their members.
func Pooled(board string) int64 {
	ms, err := parse(board)
	if err != nil {
		return 0
	}
	var sum int64
	for _, m := range ms {
		sum += m.pool
	}
	return sum / milli
}
