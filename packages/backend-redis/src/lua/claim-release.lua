-- claim-release: drops claims this delivery still holds (it rolled back or its commit failed).
-- KEYS[1..n] claims. ARGV[1] claim value.
-- Returns how many were released.
local released = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    released = released + 1
  end
end
return released
