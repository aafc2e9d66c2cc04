-- After its header, a stored schedule holds optional fields, each '<tag><byte length> <content> ' (r: a
-- recurrence, s: a one-shot schedule's stored state, e: the error of the last failed attempt; a tag of a
-- newer version is kept as it is), then the message JSON, which starts with '{'. Returns the fields
-- without the one tagged `tag`, and the message; nil when the fields are not of that form.
local function fieldsWithout(value, tag)
  local header = string.match(value, '^%d+ %-?%d+ %-?%d+ %d+ ')
  if not header then return nil end
  local pos = #header + 1
  local kept = {}
  while string.sub(value, pos, pos) ~= '{' do
    local _, stop, t, n = string.find(value, '^(%l)(%d+) ', pos)
    if not stop then return nil end
    local last = stop + tonumber(n)
    if string.sub(value, last + 1, last + 1) ~= ' ' then return nil end
    if t ~= tag then kept[#kept + 1] = string.sub(value, pos, last + 1) end
    pos = last + 2
  end
  return table.concat(kept), string.sub(value, pos)
end

-- The optional field `tag` holding `content`.
local function field(tag, content)
  return tag .. #content .. ' ' .. content .. ' '
end
