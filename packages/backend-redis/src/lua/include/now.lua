-- The server's clock in ms: claims lapse by it, whoever's clock the callers keep.
local function serverMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
