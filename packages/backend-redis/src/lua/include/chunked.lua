-- Calls `command key [option] ...` with `list` (a flat list of entries `width` arguments wide), a few
-- hundred arguments per call: Lua's unpack cannot spread many thousands at once.
local function chunked(command, key, option, list, width)
  local n = #list
  local step = 480 - (480 % width)
  for first = 1, n, step do
    local last = math.min(first + step - 1, n)
    if option then
      redis.call(command, key, option, unpack(list, first, last))
    else
      redis.call(command, key, unpack(list, first, last))
    end
  end
end
