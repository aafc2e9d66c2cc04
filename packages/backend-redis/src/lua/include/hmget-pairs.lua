-- Appends key1, value1, key2, value2, ... to `out` for `keys` of the hash, 500 fields per HMGET (Lua's unpack
-- cannot spread many thousands of values at once).
local function appendPairs(out, hash, keys)
  for first = 1, #keys, 500 do
    local last = math.min(first + 499, #keys)
    local values = redis.call('HMGET', hash, unpack(keys, first, last))
    for j = first, last do
      out[#out + 1] = keys[j]
      out[#out + 1] = values[j - first + 1]
    end
  end
  return out
end
