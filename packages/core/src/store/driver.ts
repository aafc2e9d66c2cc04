import type { StoredRecurrence } from './recurrence.js';
import type { DeadLetterRecord, Event, Message, Schedule, SchedulePageCursor } from './types.js';

/**
 * The contract a backend implements for capability 1 (transactional schedules). It is deliberately small:
 * validation, retries, aggregate folding, paging and notifications of local commits live in core
 * ({@link createStore}); a driver only stores and reads.
 *
 * Inputs reaching a driver are already validated. Every read returns fresh objects the caller may keep.
 * Errors: a lost optimistic check throws {@link ConflictError}; anything else throws (preferably a
 * {@link BackendError}) and is never reported as a conflict.
 *
 * Two styles fit this contract:
 * - Interactive (SQL): `begin()` opens a real database transaction; every method of the returned
 *   {@link DriverTransaction} runs inside it at once. `deliver()` opens one too, claims and consumes a page
 *   of due schedules in it, and gives each schedule's processor a savepoint.
 * - Buffered (key-value stores): use {@link createBufferedTransaction} and {@link createBufferedDelivery},
 *   which record operations and hand them to the driver's atomic `commit` (a Lua script, an atomic batch
 *   publish, a lock), one group per delivered schedule.
 */
export interface StoreDriver<Sql = unknown> {
  /** Opens a unit of work. */
  begin(): Promise<DriverTransaction<Sql>>;
  /**
   * Opens a delivery: one unit of work that claims up to `limit` active schedules with `dueAt <= now`,
   * in (`dueAt`, `key`) order, and consumes them. The dispatcher runs each one's processor inside it and
   * commits once for the whole page (see {@link DeliveryTransaction}). A driver with exclusive claims (row
   * locks, claim keys) never hands one schedule version to two open deliveries. With nothing due it
   * returns a delivery whose `claimed` is empty; the caller still ends it.
   */
  deliver(now: Date, limit: number): Promise<DeliveryTransaction<Sql>>;
  /** An aggregate's events in sequence order (empty when it has none). */
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /**
   * Active schedules ordered by (`at`, `key`), only those with `at <= through` when given, only keys
   * starting with `prefix` when given, strictly after `after` when given; at most `limit`.
   */
  listSchedules(query: DriverScheduleQuery): Promise<Schedule[]>;
  /**
   * Active schedules with `dueAt <= now`, ordered by (`dueAt`, `key`); at most `limit`. A read: it claims
   * nothing (tools use it; buffered drivers build their delivery claim on it).
   */
  dueSchedules(now: Date, limit: number): Promise<Schedule[]>;
  /** The earliest `dueAt` among active schedules. */
  nextDueAt(): Promise<Date | undefined>;
  /** The dead letter kept under `key`, if any. */
  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined>;
  /** Dead letters ordered by key, only keys starting with `prefix`, strictly after `after`; at most `limit`. */
  listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]>;
  /**
   * Optional push channel: calls `onChange` when another process commits schedule changes. Returns an
   * unsubscribe function. Drivers without one rely on the dispatcher's rescan.
   */
  watch?(onChange: (change: { earliest?: Date }) => void): () => void;
  close(): Promise<void>;
}

export interface DriverScheduleQuery {
  through?: Date;
  prefix?: string;
  after?: SchedulePageCursor;
  limit: number;
}

export interface DriverDeadLetterQuery {
  prefix?: string;
  after?: string;
  limit: number;
}

/** One unit of work. Exactly one of `commit` or `rollback` is called, once. */
export interface DriverTransaction<Sql = unknown> {
  /** The backend's own handle for the application's queries inside this transaction, if any. */
  readonly sql: Sql;
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /**
   * Appends `events` (their sequences continue from `expectedSequence`). Throws a ConflictError of kind
   * `aggregate` (now or at commit) when the stream's last sequence is not `expectedSequence`.
   */
  appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void>;
  /**
   * Creates or replaces the schedule under `key` as a new version, taken from a store-wide counter that
   * only grows (so a key's versions only grow, without keeping records of deleted keys); `attempts` 0, no
   * last error. `recurrence` (JSON) is stored with it as given, or none.
   */
  putSchedule(key: string, at: Date, message: Message, recurrence?: StoredRecurrence): Promise<void>;
  /** Deletes the active schedule under `key`; keeps its version counter. Returns whether one existed. */
  deleteSchedule(key: string): Promise<boolean>;
  /** Deletes every active schedule whose key starts with `prefix`; returns how many. */
  deletePrefix(prefix: string): Promise<number>;
  /** The dead letter under `key` as this transaction sees it. */
  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined>;
  /** Deletes the dead letter under `key`; returns whether there was one. */
  deleteDeadLetter(key: string): Promise<boolean>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** A failed delivery attempt, recorded on the schedule it leaves pending. */
export interface DeliveryFailure {
  /** Failed attempts of this version so far, this one included (unchanged for a quiet retry). */
  attempts: number;
  /** When the schedule may be tried again. */
  dueAt: Date;
  /** The error, as text (at most 2,000 characters). */
  error: string;
  /**
   * The occurrence the attempt was for, when it is not the schedule's `at`: a recurring schedule whose
   * catch-up rule moved on to a later occurrence. The schedule's `at` becomes this instant.
   */
  at?: Date;
}

/**
 * One delivery batch: a unit of work that has claimed and consumed the schedules in `claimed`, and in which
 * the dispatcher runs their processors one after another. Each claimed schedule is one *part*: the
 * processor's operations and the schedule's consumption commit together or not at all, independently of
 * the other parts.
 *
 * The dispatcher, for each claimed schedule in order: calls `savepoint(key)` before the processor's first
 * operation (lazily: a processor that does nothing in the transaction costs nothing); on success calls
 * `releaseSavepoint()` if it took one; on failure calls `rollbackToSavepoint()` if it took one, then
 * `restore(schedule, failure)`. Schedules it does not get to (drain) are restored without a failure.
 *
 * Exactly one of `commit` or `rollback` is called, once. A crash or a rollback leaves every claimed schedule
 * as it was (pending, redelivered).
 */
export interface DeliveryTransaction<Sql = unknown> extends Omit<DriverTransaction<Sql>, 'commit'> {
  /** The schedules this delivery claimed, in (`dueAt`, `key`) order; each is consumed unless restored. */
  readonly claimed: readonly Schedule[];
  /**
   * Starts the part of the claimed schedule `key`: the operations that follow belong to it until the next
   * call. Synchronous, because the application may take `sql` right after: an interactive driver queues
   * its `SAVEPOINT` ahead of whatever is sent next.
   */
  savepoint(key: string): void;
  /**
   * Checks that the current part left the transaction usable and ends its savepoint. Throws when it did not
   * (on PostgreSQL, a statement error the processor caught aborts the whole transaction); the dispatcher
   * then rolls the part back and records a failure.
   */
  releaseSavepoint(): Promise<void>;
  /** Undoes every operation of the current part since its `savepoint`, keeping the consumption. */
  rollbackToSavepoint(): Promise<void>;
  /**
   * Puts a claimed schedule back at its version, unconsumed, recording `failure` when given (attempts,
   * next due time, error). Called after the part's own operations were rolled back.
   */
  restore(schedule: Schedule, failure?: DeliveryFailure): Promise<void>;
  /**
   * Keeps a claimed schedule consumed and records it as a dead letter under its key (replacing an older
   * one of the same key), in this part.
   */
  deadLetter(schedule: Schedule, record: { attempts: number; error: string; deadAt: Date }): Promise<void>;
  /**
   * Arms the next occurrence of a claimed recurring schedule, in this part: puts `key` at `at` with the
   * same message, a new version and `recurrence`, unless the key has an active schedule by then (the
   * processor, or the application in a concurrent commit, wrote a newer one: that one wins).
   */
  rearm(schedule: Schedule, at: Date, recurrence: StoredRecurrence): Promise<void>;
  /**
   * Commits every part. Returns the parts that were not applied, by key, with the reason: usually a
   * `ConflictError` because a precondition no longer held at commit (a buffered driver: the schedule was
   * replaced, or an aggregate moved on). Those schedules stay exactly as they were. Throws when nothing
   * could be committed (interactive drivers commit all parts or none).
   */
  commit(): Promise<ReadonlyMap<string, Error>>;
}

/** The operations a buffered transaction hands to its driver's atomic commit, in call order. */
export type StoreOp =
  | { op: 'append'; aggregateId: string; expectedSequence: number; events: Event[] }
  | { op: 'put'; key: string; at: Date; message: Message; recurrence?: StoredRecurrence }
  /** A put that applies only when `key` has no active schedule at that point (a recurrence's next occurrence). */
  | { op: 'rearm'; key: string; at: Date; message: Message; recurrence: StoredRecurrence }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string }
  | { op: 'consume'; key: string; version: number }
  /** Records a failed attempt on `key` when it is still at `version` (no-op, not a conflict, otherwise). */
  | ({ op: 'fail'; key: string; version: number } & DeliveryFailure)
  /** Keeps a dead letter under its key, replacing an older one. */
  | { op: 'dead'; record: DeadLetterRecord }
  | { op: 'deleteDead'; key: string };
