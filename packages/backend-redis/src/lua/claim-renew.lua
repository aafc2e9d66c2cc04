-- claim-renew: extends claims this delivery still holds.
-- KEYS[1..n] claims. ARGV[1] claim value, ARGV[2] time to live (ms).
-- Returns how many of the claims were still held (and were extended).
local held = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    held = held + 1
  end
end
return held
