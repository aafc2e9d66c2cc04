-- Fails the script, before it writes anything, when `key` holds another type than `expected`.
local function checkType(key, expected)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= 'none' and actual ~= expected then
    error({err = 'DUETIME_CORRUPT key ' .. key .. ' holds a ' .. actual .. ' where duetime keeps a ' .. expected})
  end
end
