package bucket

import "github.com/floodgate-go/floodgate/store/algo"

// Grant implements [algo.Granter]: the lease step. It takes min(want, k)
// tokens when k, the whole tokens the bucket holds at now, is at least
// least; otherwise it takes nothing and Wait is the time until least
// tokens are there. want and least are clamped to 1..burst, least to at
// most want.
func (g *gcra) Grant(tat, now, want, least int64) (int64, algo.Grant) {
	want = max(1, min(want, g.burst))
	least = max(1, min(least, want))
	tat = g.normalise(tat, now)
	var out algo.Grant
	// Whole tokens there: a TAT beyond tau (reservations queued) leaves
	// none.
	avail := max(0, g.tau-(tat-now)) / g.t
	if avail >= least {
		out.Granted = min(want, avail)
		tat += out.Granted * g.t
	} else {
		out.Wait = tat + least*g.t - g.tau - now
	}
	out.Remaining = max(0, min((g.tau-(tat-now))/g.t, g.burst))
	out.Reset = tat - now
	return tat, out
}

// Refill implements [algo.Granter]: the bucket's rate, tokens per second.
func (g *gcra) Refill() float64 { return 1e6 / float64(g.t) }

// GrantLua implements [algo.Granter]: the Lua twin of Grant. p = {interval,
// burst, span}.
func (g *gcra) GrantLua() string { return grantLua }

const grantLua = `
return function(tat, now, want, least, p)
  local t, burst, span = p[1], p[2], p[3]
  local tau = t * burst
  if want > burst then want = burst end
  if want < 1 then want = 1 end
  if least > want then least = want end
  if least < 1 then least = 1 end
  if tat < now then tat = now end
  if tat - now > span then tat = now + tau end
  local room = tau - (tat - now)
  if room < 0 then room = 0 end
  local avail = math.floor(room / t)
  local granted, wait = 0, 0
  if avail >= least then
    granted = avail
    if granted > want then granted = want end
    tat = tat + granted * t
  else
    wait = tat + least * t - tau - now
  end
  local rem = math.floor((tau - (tat - now)) / t)
  if rem < 0 then rem = 0 end
  if rem > burst then rem = burst end
  return tat, granted, wait, rem, tat - now
end
`
