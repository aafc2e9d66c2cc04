-- Appends key1, value1, key2, value2, ... to `out` for `keys` of the hash, 500 fields per HMGET (Lua's unpack
-- cannot spread many thousands of values at once). With `heads`, each value is cut to its header.
local function appendPairs(out, hash, keys, heads)
  for first = 1, #keys, 500 do
    local last = math.min(first + 499, #keys)
    local values = redis.call('HMGET', hash, unpack(keys, first, last))
    for j = first, last do
      local value = values[j - first + 1]
      if heads and value then value = string.match(value, '^%d+ %-?%d+ %-?%d+ %d+ ') or value end
      out[#out + 1] = keys[j]
      out[#out + 1] = value
    end
  end
  return out
end
