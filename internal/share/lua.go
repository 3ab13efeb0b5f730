package share

// Lua is the twin of Divide: a Lua chunk that evaluates to
//
//	function(grant, p, w, now, board, want, least, member, demand, ttl, refill)
//	  ... return w2, board2, granted, wait, remaining, reset, shared, last end
//
// where grant is the algorithm's Lua grant step (algo.Granter.GrantLua),
// p its parameters, board the board's value ("" when none), ttl the
// claim's Period in µs, refill the Granter's Refill, shared 1 or 0 and
// last the latest time a member's report on the new board expires (µs;
// the store keeps the board until then at least).
// A claim without a member (member == "") is grant's plain step.
const Lua = `
local everything = 1125899906842624
local function spread(ms, me, units, total)
  if units <= 0 or total <= 0 then return end
  local given = 0
  do
    for i = 1, #ms do
      local add = math.floor(units * ms[i][2] / total)
      if add > units - given then add = units - given end
      ms[i][4] = ms[i][4] + add
      given = given + add
      if ms[i][2] > me[2] then me = ms[i] end
    end
  end
  me[4] = me[4] + units - given
end
return function(grant, p, w, now, board, want, least, member, demand, ttl, refill)
  if member == '' then
    local w2, g, wait, rem, reset = grant(w, now, want, least, p)
    return w2, board, g, wait, rem, reset, 0
  end
  local ms, orphan, me, clk = {}, 0, nil, nil
  for id, d, e, pl in string.gmatch(board, '(%S+) (%d+) (%d+) (%d+)\n') do
    d, e, pl = tonumber(d), tonumber(e), tonumber(pl)
    if id == '~' then
      ms[#ms + 1] = {id, d, e, pl}
      clk = ms[#ms]
    elseif id ~= member and e <= now then
      orphan = orphan + pl
    else
      ms[#ms + 1] = {id, d, e, pl}
      if id == member then me = ms[#ms] end
    end
  end
  if not me then
    me = {member, 0, 0, 0}
    ms[#ms + 1] = me
  end
  me[2], me[3] = demand, now + ttl
  if demand == 0 then
    local take = math.floor(me[4] / 1000)
    if take > want then take = want end
    local rest = orphan + me[4] - take * 1000
    local left, total = {}, 0
    for i = 1, #ms do
      if ms[i] ~= me then
        left[#left + 1] = ms[i]
        total = total + ms[i][2]
      end
    end
    if #left > 0 then spread(left, left[1], rest, total) end
    local out, last = {}, now
    for i = 1, #left do
      out[i] = string.format('%s %d %d %d\n', left[i][1], left[i][2], left[i][3], left[i][4])
      if left[i][3] > last then last = left[i][3] end
    end
    return w, table.concat(out), take, 0, 0, 0, 0, last
  end
  local total = 0
  for i = 1, #ms do total = total + ms[i][2] end
  spread(ms, me, orphan, total)
  local granted, wait, rem, reset, shared
  if total > 0 and total > 0.9 * refill then
    if not clk then
      clk = {'~', 0, 0, 0}
      ms[#ms + 1] = clk
    end
    local extra = 0
    if clk[3] > 0 and w < now then
      local from = w
      if clk[3] > from then from = clk[3] end
      local back = now - math.floor(ttl / 3)
      if back > from then from = back end
      if from < now then extra = math.floor((now - from) * refill / 1000) end
    end
    local all
    w, all, wait, rem, reset = grant(w, now, everything, 1, p)
    spread(ms, me, all * 1000 + extra, total)
    clk[3] = now + reset
    granted = math.floor(me[4] / 1000)
    if granted > want then granted = want end
    me[4] = me[4] - granted * 1000
    wait, shared = 0, 1
    if granted == 0 then
      if me[2] <= 0 or not (refill > 0) then
        wait = me[3] - now
      else
        wait = math.ceil((1000 - me[4]) * 1000 * total / (refill * me[2]))
        if wait > 1e15 then wait = 1e15 end
      end
    end
  else
    w, granted, wait, rem, reset = grant(w, now, want, least, p)
    local extra = math.floor(me[4] / 1000)
    if extra > want - granted then extra = want - granted end
    if extra > 0 then
      me[4] = me[4] - extra * 1000
      granted, wait = granted + extra, 0
    end
    shared = 0
  end
  local out, last = {}, now
  for i = 1, #ms do
    out[i] = string.format('%s %d %d %d\n', ms[i][1], ms[i][2], ms[i][3], ms[i][4])
    if ms[i][3] > last then last = ms[i][3] end
  end
  return w, table.concat(out), granted, wait, rem, reset, shared, last
end
`
