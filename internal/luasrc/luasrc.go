// Package luasrc holds Lua source shared by the algorithms' Lua twins.
package luasrc

// FloorDiv defines fdiv(a, b), the floor of a/b for integers below 2^53 and
// b > 0: math.floor(a / b) alone can round up when a/b is within an ulp of
// an integer, and is corrected by the remainder.
const FloorDiv = `
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end
`
