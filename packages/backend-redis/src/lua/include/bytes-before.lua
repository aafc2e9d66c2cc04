-- True when `a` sorts before `b` byte by byte, the order of sorted-set members. Lua's own `<` on strings
-- follows the server's locale (strcoll), so it is never used on keys.
local function bytesBefore(a, b)
  if a == b then return false end
  local n = math.min(#a, #b)
  local i = 1
  while i <= n do
    local j = math.min(i + 63, n)
    if string.sub(a, i, j) ~= string.sub(b, i, j) then
      for k = i, j do
        local x, y = string.byte(a, k), string.byte(b, k)
        if x ~= y then return x < y end
      end
    end
    i = j + 1
  end
  return #a < #b
end
