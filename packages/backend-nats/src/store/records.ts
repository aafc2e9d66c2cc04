import {
  CorruptDataError,
  type DeadLetterRecord,
  decodeSchedule,
  type Event,
  type Message,
  type Schedule,
  type StoredState,
} from '@duetime/core';
import type { StoredMessage } from '../io.js';

/**
 * How the store's values are written, in version 1 of the stored format (see docs/design.md). Every
 * value is JSON; instants are epoch milliseconds. A field a later version adds is ignored by this one.
 */

/** Header on a tombstone: the subject's value was deleted (the tombstone expires after a while). */
export const DELETED = 'Duetime-Deleted';
/** How long a tombstone stays before the server removes it (`Nats-TTL`). */
export const TOMBSTONE_TTL = '60s';

/** A schedule's record (`s.<key>`). */
export interface RecordValue {
  /** The deadline. */
  at: number;
  /** When it may next be delivered. */
  due: number;
  m: Message;
  /** Failed attempts of this version. */
  n: number;
  /** The last attempt's error. */
  e?: string;
  /** The stored state: a recurrence, or a one-shot schedule's operator state. */
  r?: StoredState;
  /**
   * The version, when this record rewrites one (a failed attempt): a record without it starts a new
   * version, numbered by its own stream sequence (plus the store's version base).
   */
  v?: number;
  /**
   * The id of the record's timer (`t.<key>`), copied to what it fires: a fire whose id is not the
   * current record's is stale. Absent in records of format 1, whose timers use `s<sequence>`.
   */
  t?: string;
}

/** A dead letter (`x.<key>`). */
export interface DeadLetterValue {
  v: number;
  at: number;
  m: Message;
  n: number;
  e: string;
  dead: number;
}

/** An event (`e.<aggregate>.<sequence>`); the aggregate and the sequence are in the subject. */
export interface EventValue {
  t: string;
  d?: unknown;
  ts: number;
}

/** The store's format record (`meta`), written once when the stream is created. */
export interface MetaValue {
  format: 'duetime-nats-store';
  /** 1: the due index and claim markers of the store's own; 2: timers and the fires consumer. */
  version: 1 | 2;
  /** Added to record sequences to make versions (non-zero for a store migrated from the old format). */
  versionBase: number;
}

const decoder = new TextDecoder();

export function isTombstone(m: StoredMessage): boolean {
  return m.header(DELETED) !== undefined || m.data.length === 0;
}

function parse<T>(m: StoredMessage, what: string): T {
  try {
    return JSON.parse(decoder.decode(m.data)) as T;
  } catch (error) {
    throw new CorruptDataError(
      `message ${m.seq} on ${m.subject} is not a duetime ${what} (not JSON); another application uses this prefix?`,
      { cause: error },
    );
  }
}

function isMessage(value: unknown): value is Message {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Record<string, unknown>;
  return typeof m.type === 'string' && (m.aggregateId === undefined || typeof m.aggregateId === 'string');
}

/** A record message as a schedule, or undefined for a tombstone. */
export function toSchedule(key: string, m: StoredMessage, versionBase: number): Schedule | undefined {
  if (isTombstone(m)) return undefined;
  const r = parse<RecordValue>(m, 'schedule');
  if (
    typeof r !== 'object' ||
    r === null ||
    typeof r.at !== 'number' ||
    typeof r.due !== 'number' ||
    !isMessage(r.m)
  )
    throw new CorruptDataError(`message ${m.seq} on ${m.subject} is not a duetime schedule`);
  return decodeSchedule(
    {
      key,
      at: r.at,
      dueAt: r.due,
      message: r.m,
      version: r.v ?? versionBase + m.seq,
      attempts: r.n ?? 0,
      lastError: r.e,
      recurrence: r.r,
    },
    `nats ${m.subject}`,
  );
}

/** Whether a record's stored state is a recurrence (not a one-shot schedule's operator state). */
export function isRecurring(schedule: Pick<Schedule, 'recurrence'>): boolean {
  return schedule.recurrence !== undefined;
}

export function encodeRecord(r: RecordValue): string {
  return JSON.stringify(r);
}

export function toDeadLetter(key: string, m: StoredMessage): DeadLetterRecord | undefined {
  if (isTombstone(m)) return undefined;
  const d = parse<DeadLetterValue>(m, 'dead letter');
  if (typeof d !== 'object' || d === null || typeof d.v !== 'number' || !isMessage(d.m))
    throw new CorruptDataError(`message ${m.seq} on ${m.subject} is not a duetime dead letter`);
  return {
    key,
    version: d.v,
    at: new Date(d.at),
    message: d.m,
    attempts: d.n,
    error: d.e,
    deadAt: new Date(d.dead),
  };
}

export function encodeDeadLetter(record: DeadLetterRecord): string {
  const value: DeadLetterValue = {
    v: record.version,
    at: record.at.getTime(),
    m: record.message,
    n: record.attempts,
    e: record.error,
    dead: record.deadAt.getTime(),
  };
  return JSON.stringify(value);
}

export function toEvent(aggregateId: string, sequence: number, m: StoredMessage): Event {
  const e = parse<EventValue>(m, 'event');
  if (typeof e !== 'object' || e === null || typeof e.t !== 'string' || typeof e.ts !== 'number')
    throw new CorruptDataError(`message ${m.seq} on ${m.subject} is not a duetime event`);
  return {
    type: e.t,
    aggregateId,
    ...(e.d !== undefined ? { data: e.d } : {}),
    sequence,
    timestamp: e.ts,
  };
}

export function encodeEvent(event: Event): string {
  const value: EventValue = { t: event.type, ts: event.timestamp };
  if (event.data !== undefined) value.d = event.data;
  return JSON.stringify(value);
}

/** The id of the timer a record message's schedule fires with (see {@link RecordValue.t}). */
export function timerIdOf(m: StoredMessage): string {
  const r = parse<RecordValue>(m, 'schedule');
  return typeof r?.t === 'string' ? r.t : `s${m.seq}`;
}
