import type { Event, Message, Schedule, SchedulePageCursor } from './types.js';

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
 *   {@link DriverTransaction} runs inside it at once.
 * - Buffered (key-value stores): use {@link createBufferedTransaction}, which records operations and hands
 *   them to the driver's single atomic `commit` (a Lua script, a commit-log message, a lock).
 */
export interface StoreDriver<Sql = unknown> {
  /** Opens a unit of work. */
  begin(): Promise<DriverTransaction<Sql>>;
  /** An aggregate's events in sequence order (empty when it has none). */
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /**
   * Active schedules ordered by (`at`, `key`), only those with `at <= through` when given, only keys
   * starting with `prefix` when given, strictly after `after` when given; at most `limit`.
   */
  listSchedules(query: DriverScheduleQuery): Promise<Schedule[]>;
  /** Active schedules with `dueAt <= now`, ordered by (`dueAt`, `key`); at most `limit`. */
  dueSchedules(now: Date, limit: number): Promise<Schedule[]>;
  /** The earliest `dueAt` among active schedules. */
  nextDueAt(): Promise<Date | undefined>;
  /**
   * Records a failed delivery of `key` at `version`: sets `attempts` and moves `dueAt`. Does nothing when
   * the key is no longer at that version. Returns whether it recorded.
   */
  recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean>;
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
   * only grows (so a key's versions only grow, without keeping records of deleted keys).
   */
  putSchedule(key: string, at: Date, message: Message): Promise<void>;
  /** Deletes the active schedule under `key`; keeps its version counter. Returns whether one existed. */
  deleteSchedule(key: string): Promise<boolean>;
  /** Deletes every active schedule whose key starts with `prefix`; returns how many. */
  deletePrefix(prefix: string): Promise<number>;
  /**
   * Stages the consumption of `key` at `version`: it will be deleted when this transaction commits.
   * Returns false when the key is not active at that version (stale) or another transaction holds it
   * (an interactive driver may use `FOR UPDATE SKIP LOCKED`); a buffered driver also re-checks at commit
   * and throws a ConflictError of kind `schedule` there.
   */
  consume(key: string, version: number): Promise<boolean>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** The operations a buffered transaction hands to its driver's atomic commit, in call order. */
export type StoreOp =
  | { op: 'append'; aggregateId: string; expectedSequence: number; events: Event[] }
  | { op: 'put'; key: string; at: Date; message: Message }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string }
  | { op: 'consume'; key: string; version: number };
