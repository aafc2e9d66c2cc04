export {
  CRON_MACROS,
  type CronFieldName,
  type CronFields,
  type DayRule,
  parseCronFields,
} from './cron-fields.js';
export {
  CronSpec,
  type CronSpecDescription,
  MAX_INSTANT_MS,
  MIN_INSTANT_MS,
  type ParseCronOptions,
  parseCron,
} from './cron-spec.js';
export {
  formatDuration,
  IntervalSpec,
  type IntervalSpecDescription,
  interval,
  intervalFrom,
  MAX_INTERVAL_MS,
} from './interval.js';
export * from './spec.js';
export {
  between,
  days,
  formatTimeOfDay,
  lastDayOfMonth,
  parseTimeOfDay,
  parseWeekday,
  type TimeOfDay,
  unlessBetween,
  Window,
  type WindowClock,
  type WindowDescription,
} from './window.js';
export {
  type OffsetSegment,
  validateZone,
  type WallClock,
  wallClock,
  ZoneOffsets,
  zoneOffsets,
} from './zone.js';
