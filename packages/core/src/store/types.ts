import type { QueuedDelivery, StoredRecurrence } from './recurrence.js';

/**
 * What the application hands to duetime and gets back. A `Message` is what a schedule delivers; an
 * `Event` is a message that happened to an aggregate, with its place in that aggregate's stream.
 */
export interface Message<Data = unknown> {
  /** What happened or what to do, e.g. `order.expire`. 1 to 512 characters. */
  type: string;
  /**
   * The aggregate (entity) the message is about, e.g. `ORD-1`: 1 to 512 characters. Optional: messages
   * for applications that do not use aggregates (`tx.exec`) need only a type and their data.
   */
  aggregateId?: string;
  /** Any JSON data. The whole message serialises to at most 256 KiB. */
  data?: Data;
  /**
   * Trace context of the transaction that scheduled the message, as an OpenTelemetry propagator writes it
   * (W3C `traceparent` and `tracestate`): filled in by `tx.schedule` when `@opentelemetry/api` is
   * installed and a span is active, and read by the dispatcher to link its delivery span to it. Stored
   * inside the message, so every backend carries it. At most 8 entries of at most 512 characters each.
   * Processors get the message without it.
   */
  trace?: MessageTrace;
}

/** Propagation fields carried by a {@link Message} (see `Message.trace`). */
export type MessageTrace = Readonly<Record<string, string>>;

/** A message recorded in an aggregate's stream. */
export interface Event<Data = unknown> extends Message<Data> {
  /** The aggregate whose stream holds the event. */
  aggregateId: string;
  /** 1-based position in the aggregate's stream, without gaps. */
  sequence: number;
  /** When it was raised (milliseconds since the epoch, the store's clock). */
  timestamp: number;
}

/** A pending schedule: one-shot, or the next occurrence of a recurring one. */
export interface Schedule<Data = unknown> {
  key: string;
  /** The deadline it was scheduled for. */
  at: Date;
  message: Message<Data>;
  /**
   * Grows each time the key is scheduled and never resets, not even after the schedule is consumed or
   * cancelled, so an old version can never be mistaken for a new one (no ABA). Versions come from one
   * counter per store, so they are not consecutive per key, and no record of a deleted key is kept.
   */
  version: number;
  /** Failed delivery attempts of this version so far. */
  attempts: number;
  /** When the dispatcher may next try it: `at`, or later after failed attempts. */
  dueAt: Date;
  /** The error of the last failed attempt of this version, when one failed. */
  lastError?: string;
  /**
   * Present on a recurring schedule: the recurrence `at` is an occurrence of, in its stored form (see
   * {@link recurring}). Each occurrence is a new version.
   */
  recurrence?: StoredRecurrence;
  /**
   * Present while the schedule is paused (`tx.pauseSchedule`): since when, and the note given. A paused
   * schedule's own deliveries wait (its `dueAt` is far in the future) until `tx.resumeSchedule`.
   */
  paused?: { at: Date; note?: string };
  /**
   * Extra deliveries queued beside the schedule's own, oldest first (`tx.triggerSchedule`,
   * `tx.backfillSchedule`, occurrences caught up by `tx.resumeSchedule`): each is delivered when due, even
   * while paused, without moving the schedule's deadline.
   */
  queue?: QueuedDelivery[];
  /**
   * Only on items of a page read with `preview` (see {@link ScheduleQuery.preview}): the message's data as
   * JSON text, cut for display; `message.data` is then left out.
   */
  dataPreview?: DataPreview;
}

/**
 * A message's data cut for display: the start of its JSON text (`JSON.stringify(data)`), at most the
 * `preview` characters (Unicode code points) asked for, and whether anything was left out. Load the whole
 * value with `loadSchedule` or `loadDeadLetter`.
 */
export interface DataPreview {
  /** The first characters of the data's JSON text (all of it when `cut` is false). */
  text: string;
  /** True when the JSON text is longer than `text`. */
  cut: boolean;
}

/**
 * A message the dispatcher gave up on (after `maxAttempts`, or an {@link UnrecoverableError}), kept in the
 * store until it is retried or discarded (`tx.retryDeadLetter`, `tx.discardDeadLetter`). One per key: a
 * later dead letter of the same key replaces the earlier one.
 */
export interface DeadLetterRecord<Data = unknown> {
  key: string;
  /** The version that was given up on. */
  version: number;
  /** The deadline it was scheduled for (for a recurring schedule, the occurrence). */
  at: Date;
  message: Message<Data>;
  /** Failed attempts, the last one included. */
  attempts: number;
  /** The error of the last attempt. */
  error: string;
  /** When it was dead-lettered (the store's clock). */
  deadAt: Date;
  /** Only on items of a page read with `preview` (see {@link DeadLetterQuery.preview}). */
  dataPreview?: DataPreview;
}

/** A query for a page of dead letters, ordered by key. */
export interface DeadLetterQuery {
  /** Only keys that start with this literal prefix. */
  prefix?: string;
  /** Continue after this key (the `next` of a previous page). */
  after?: string;
  /** Page size, 1 to 10,000 (default 500). */
  limit?: number;
  /** Cut each message's data at this many characters, as {@link ScheduleQuery.preview} does. */
  preview?: number;
}

export interface DeadLetterPage {
  items: DeadLetterRecord[];
  /** Present when more items may follow. */
  next?: string;
}

/** Where a page of {@link Schedule}s ended; pass it back to get the next page. */
export interface SchedulePageCursor {
  at: number;
  key: string;
}

/**
 * A query for a page of active schedules, ordered by deadline then key (`order: 'at'`, the default) or by
 * the time each is next due (`order: 'due'`: retries wait past their deadline).
 */
export interface ScheduleQuery {
  /** `at` (default): by deadline, then key. `due`: by when each is next due (`dueAt`), then key. */
  order?: 'at' | 'due';
  /** Only schedules whose ordering instant (deadline, or due time for `due`) is at or before this. */
  through?: Date;
  /** Only keys that start with this literal prefix. */
  prefix?: string;
  /** Only recurring schedules (`true`) or only one-shot ones (`false`). */
  recurring?: boolean;
  /** Continue after this position. */
  after?: SchedulePageCursor;
  /** Page size, 1 to 10,000 (default 500). */
  limit?: number;
  /**
   * For display: cut each message's data at this many characters (1 to 262,144). Items then come without
   * `message.data` and, when the message has data, with `dataPreview` (its JSON text, cut, and whether it
   * was). SQL backends cut in the query, so a page of 200 KB messages moves at most `preview` characters of
   * each out of the database; other backends load the message and cut it. Everything else (type, aggregate,
   * trace, last error, recurrence) comes whole.
   */
  preview?: number;
}

/** A query for {@link Store.countSchedules}: the filters of {@link ScheduleQuery}, counted up to `limit`. */
export interface ScheduleCountQuery {
  /** `at` (default) or `due`: which instant `through` bounds. */
  order?: 'at' | 'due';
  through?: Date;
  prefix?: string;
  recurring?: boolean;
  /** Counts up to this many (default 10,000, at most 100,000); a count equal to it means "at least". */
  limit?: number;
}

/**
 * What {@link Store.dueBacklog} tells: the schedules due now that no delivery has consumed yet, as the
 * backend delivers them.
 */
export interface DueBacklog {
  /** How many, counted up to the query's `limit` (a count equal to it means "at least that many"). */
  count: number;
  /** The earliest due time among them, when known (absent when none is due). */
  oldest?: Date;
}

export interface SchedulePage {
  items: Schedule[];
  /** Present when more items may follow. */
  next?: SchedulePageCursor;
}

/** What a local commit or a remote change notification tells listeners. */
export interface StoreChange {
  /** The earliest deadline among schedules this change created, when known. */
  earliest?: Date;
  /** True when the change came from another process through the backend's push channel. */
  remote: boolean;
  /**
   * Set when the backend's push channel changed state instead of data: `live` (connected; changes made
   * while it was down were not reported, so look at the store again) or `lost`.
   */
  channel?: 'live' | 'lost';
}
