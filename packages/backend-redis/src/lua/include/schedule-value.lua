-- A schedule is stored as 'version at dueAt attempts message-JSON' (numbers in decimal, times in ms).
-- Returns its four numbers as the strings stored, so they are written back without conversion.
local function parseSchedule(hash, key, value)
  local version, at, dueAt, attempts = string.match(value, '^(%d+) (%-?%d+) (%-?%d+) (%d+) ')
  if not version then
    error({err = 'DUETIME_CORRUPT key ' .. hash .. ' field ' .. key .. ' does not hold a duetime schedule'})
  end
  return version, at, dueAt, attempts
end
