-- ZRANGEBYLEX bounds for every member that starts with `prefix` (byte for byte; nothing is a pattern). UTF-8
-- never contains the byte 0xFF, so prefix .. '\255' sorts after every valid key that starts with prefix.
local function prefixRange(prefix)
  if prefix == '' then return '-', '+' end
  return '[' .. prefix, '(' .. prefix .. '\255'
end
