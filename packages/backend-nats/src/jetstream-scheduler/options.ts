import {
  type Clock,
  duration,
  InvalidArgumentError,
  type Logger,
  positiveInteger,
  silentLogger,
  systemClock,
} from '@duetime/core';
import type { RequestedMode, StreamSetup } from './stream.js';
import { defaultStreamName, validName, validPrefix } from './subjects.js';

/** Options of {@link JetStreamScheduler}. */
export interface JetStreamSchedulerOptions {
  /** Subject prefix: dot-separated tokens of letters, digits, `-`, `_` (default `duetime`). */
  prefix?: string;
  /** Stream name (default: the prefix with `.` as `_`, then `_sched`). */
  stream?: string;
  /**
   * `auto` (default): native on a server >= 2.12 whose stream keeps `allow_msg_schedules`, emulated
   * otherwise. `native` fails where the server cannot; `emulated` forces the pump (on a new stream only).
   */
  mode?: RequestedMode;
  /** Stream dedup window for new streams (default 120 000 ms); `atId` and the pump rely on it. */
  duplicateWindow?: number;
  /** Stream replicas for new streams (default 1). */
  replicas?: number;
  /** Stream storage for new streams (default `file`). */
  storage?: 'file' | 'memory';
  /** Whether this process may run the emulated pump (default true). Ignored in native mode. */
  pump?: boolean;
  /** Pump lease time-to-live (default 10 000 ms): how long a crashed pump's successor waits. */
  leaseTtl?: number;
  /** A cron tick the pump reaches later than this is skipped (default 5 000 ms, below half the dedup window). */
  missedTickGrace?: number;
  /** Definitions the pump fires at once (default 64). */
  pumpConcurrency?: number;
  /**
   * Native mode: how long before its due instant the server fires a one-shot timer (default 0, at the
   * instant; at most 60 000 ms). While schedules keep falling due, the server fires them on a 250 ms grid,
   * so a fire is 0–250 ms late; fired early, a message waits in `consumeFired` (its acknowledgement kept
   * alive) until its `Duetime-Due` instant and its handler runs on time. A reader of the fire subject
   * other than `consumeFired` then sees messages before they are due: it must wait for `Duetime-Due`
   * itself. 500 covers the grid and a busy consumer's delivery. Cron ticks fire at their instant.
   */
  fireAheadMs?: number;
  clock?: Clock;
  logger?: Logger;
}

/** A one-shot timer as stored. */
export interface ScheduledTimer {
  key: string;
  /** `<key token>.<timer id>`: also the fired message's id (`once:<this>`). */
  timer: string;
  due: Date;
  /** The definition's subject. */
  subject: string;
  /** The definition's stream sequence (for `atId` duplicates: the original's). */
  sequence: number;
  /** True when `atId` was a republish inside the dedup window and the stream dropped it. */
  duplicate: boolean;
}

/** A cron definition as stored. */
export interface ScheduledCron {
  name: string;
  key: string;
  expression: string;
  /** The next tick after now (UTC). */
  next: Date;
  subject: string;
  sequence: number;
}

/** What `ensureStream()` settled on. */
export interface SchedulerInfo extends StreamSetup {
  stream: string;
  prefix: string;
}

/** The options with defaults applied, each checked. */
export type ResolvedOptions = ReturnType<typeof resolveOptions>;

/** Checks every option and applies defaults; throws {@link InvalidArgumentError} naming `options.<name>`. */
export function resolveOptions(options: JetStreamSchedulerOptions) {
  const prefix = validPrefix(options.prefix ?? 'duetime');
  const mode = options.mode ?? 'auto';
  if (mode !== 'auto' && mode !== 'native' && mode !== 'emulated')
    throw new InvalidArgumentError('options.mode', mode, 'must be "auto", "native" or "emulated"');
  const duplicateWindow = duration('options.duplicateWindow', options.duplicateWindow ?? 120_000);
  if (duplicateWindow < 1_000)
    throw new InvalidArgumentError('options.duplicateWindow', duplicateWindow, 'must be at least 1000 ms');
  const storage = options.storage ?? 'file';
  if (storage !== 'file' && storage !== 'memory')
    throw new InvalidArgumentError('options.storage', storage, 'must be "file" or "memory"');
  const leaseTtl = duration('options.leaseTtl', options.leaseTtl ?? 10_000);
  if (leaseTtl < 300) throw new InvalidArgumentError('options.leaseTtl', leaseTtl, 'must be at least 300 ms');
  if (options.pump !== undefined && typeof options.pump !== 'boolean')
    throw new InvalidArgumentError('options.pump', options.pump, 'must be true or false');
  return {
    prefix,
    stream: validName('options.stream', options.stream ?? defaultStreamName(prefix)),
    mode,
    duplicateWindow,
    replicas: positiveInteger('options.replicas', options.replicas ?? 1),
    storage,
    pump: options.pump ?? true,
    leaseTtl,
    /** Undefined: derived from the stream's dedup window once it is known. */
    missedTickGrace:
      options.missedTickGrace === undefined
        ? undefined
        : duration('options.missedTickGrace', options.missedTickGrace, { allowZero: true }),
    pumpConcurrency: positiveInteger('options.pumpConcurrency', options.pumpConcurrency ?? 64),
    fireAheadMs: duration('options.fireAheadMs', options.fireAheadMs ?? 0, { allowZero: true, max: 60_000 }),
    clock: options.clock ?? systemClock,
    logger: options.logger ?? silentLogger,
  };
}
