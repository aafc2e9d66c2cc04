export type {
  ConsumeFiredOptions,
  DeadLetterHandler,
  DeadLetterInfo,
  DeadLetterReason,
  FiredConsumer,
  FiredHandler,
  FiredInfo,
} from './consume.js';
export { parseCron6 } from './cron.js';
export type {
  JetStreamSchedulerOptions,
  ScheduledCron,
  ScheduledTimer,
  SchedulerInfo,
} from './options.js';
export { JetStreamScheduler } from './scheduler.js';
export type { RequestedMode, ScheduleMode } from './stream.js';
export { decodeToken, encodeToken } from './subjects.js';
export { isTerminal, Terminal, TerminalError } from './terminal.js';
