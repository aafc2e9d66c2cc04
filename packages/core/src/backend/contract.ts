/**
 * The contract a duetime backend implements: the first file to read when writing one.
 *
 * A backend is three small parts that {@link defineBackend} wraps:
 * - a {@link StoreAdapter} (capability 1: transactional schedules), 7 methods plus up to 9 optional ones;
 * - a {@link LeaseBackend} (leadership and overlap leases for calendars), 4 methods;
 * - a {@link CursorBackend} (per-schedule progress of calendars), 2 methods.
 *
 * Everything else lives in core, once: validation of every argument (an adapter only ever sees clean
 * input), options and URLs, the open/closed lifecycle, transactions' bookkeeping (what was written, what a
 * read must see), every delivery decision (retries, backoff, dead letters, recurrences, catch-up, crash
 * counting and isolation), claim renewal timers, change fan-out and telemetry. An adapter stores and reads,
 * in its engine's best shape.
 *
 * Two styles of store fit the contract, and an adapter picks one by implementing `write` or not:
 * - **Interactive** (SQL): `begin()` opens a real transaction. Core sends writes with `write()` as it goes
 *   (before any read through the unit, and at the end of each processor's part) and the rest with
 *   `commit()`. Processors may use the unit's `sql` handle; each runs inside `part()`, a savepoint.
 * - **Buffered** (key-value stores, logs): `begin()` opens nothing lasting. Core keeps every write and hands
 *   them all to `commit()`, which applies them atomically (a Lua script, an atomic batch, a lock), each
 *   delivered schedule's group all or nothing.
 *
 * The in-memory backend (`createMemoryBackend`) implements the buffered style in a few hundred lines and is
 * the reference; `examples/custom-adapter` is another.
 */
import type { StoredState } from '../store/recurrence.js';
import type { DeadLetterRecord, DueBacklog, Event, Message, Schedule } from '../store/types.js';

export type { CursorBackend, LeaseBackend, LeaseGrant, LeaseHolder } from '../lease/types.js';

/**
 * One unit of work of an adapter: a transaction, or a buffered batch of writes. The adapter defines its
 * own unit type (a connection and its state, a token, …); core only reads these two fields.
 */
export interface Unit<Sql = unknown> {
  /** The handle for the application's own queries inside this unit (`tx.sql`), on SQL backends. */
  readonly sql?: Sql;
  /**
   * The schedules this unit claimed, when opened with a claim (`begin({ now, limit })`), in (`dueAt`,
   * `key`) order.
   */
  readonly claimed?: readonly Claimed[];
}

/** A claimed schedule: the version the unit holds, and whether an earlier claim of it was interrupted. */
export type Claimed = Schedule & {
  /**
   * True when an earlier delivery claimed this version and never settled it: its process died (a crash,
   * a kill, an out-of-memory) with the claim held. Core counts that as a failed attempt and delivers the
   * schedule alone from then on, so a message that kills its process ends in the dead letters instead of
   * taking other messages down with it.
   */
  interrupted?: boolean;
};

/** What a delivery claims: due schedules (`dueAt <= now`), at most `limit`. */
export interface ClaimRequest {
  now: Date;
  limit: number;
}

/**
 * A write inside a unit, in the order the application made it. Each is applied as if alone, in order:
 * a later write sees what an earlier one did.
 */
export type Write =
  /**
   * Creates or replaces the schedule under `key` as a new version, taken from a store-wide counter that
   * only grows (so a key's versions only grow, without keeping records of deleted keys): `attempts` 0, no
   * last error, due at `dueAt` (default `at`). `recurrence`, the schedule's stored state (a recurrence, or
   * a one-shot schedule's operator state), is kept as given: JSON, opaque to the adapter; none when absent.
   * With `ifVersion`, it applies only while the key's active schedule is at that version; otherwise it
   * fails with a `ConflictError` of kind `version` (the schedule changed since it was read: core re-runs
   * the transaction). Interactive adapters check it as they apply it, buffered ones at the commit.
   */
  | {
      op: 'put';
      key: string;
      at: Date;
      dueAt?: Date;
      message: Message;
      recurrence?: StoredState;
      ifVersion?: number;
    }
  /** Deletes the active schedule under `key`; its version counter is kept. */
  | { op: 'delete'; key: string }
  /** Deletes every active schedule whose key starts with `prefix` (literally). */
  | { op: 'deletePrefix'; prefix: string }
  /**
   * Appends `events` to an aggregate's stream; their sequences continue from `expectedSequence`. Fails with
   * a `ConflictError` of kind `aggregate` when the stream's last sequence is not `expectedSequence`.
   */
  | { op: 'append'; aggregateId: string; expectedSequence: number; events: Event[] }
  /** Deletes the dead letter under `key`. */
  | { op: 'deleteDead'; key: string };

/**
 * How a delivery ends for one claimed schedule, decided by core. Every claimed schedule gets exactly one.
 */
export interface Settlement {
  /** The claimed schedule: its `key` and the `version` claimed. */
  schedule: Schedule;
  /**
   * - `consume`: the version is done (delivered, dead-lettered or skipped by its catch-up rule) and deleted.
   * - `retry`: the version stays, with the failed attempt recorded (`failure`).
   * - `release`: the version stays as it was, claimed no longer (not run: a drain, the batch's time budget,
   *   or isolation).
   */
  outcome: 'consume' | 'retry' | 'release';
  /** `consume` only: keep the message as the dead letter of its key, replacing an older one. */
  dead?: { attempts: number; error: string; deadAt: Date };
  /**
   * `consume` only: arm what comes next (a recurrence's next occurrence, or a schedule's own delivery
   * after a queued one) as a new version of the same key with the same message, due at `dueAt` (default
   * `at`), with `recurrence` as its stored state (none when absent) — unless the key holds an active
   * schedule once this settlement's writes are applied (the processor scheduled the key itself: its
   * schedule wins).
   */
  next?: { at: Date; dueAt?: Date; recurrence?: StoredState };
  /**
   * `retry` only, applied only while the key is still at the claimed version: `attempts` and `lastError`
   * recorded, due again at `dueAt`. `at` moves the schedule's deadline (a recurring schedule whose catch-up
   * rule moved on to a later occurrence).
   */
  failure?: { attempts: number; dueAt: Date; error: string; at?: Date };
  /**
   * The writes of this schedule's part (its processor's, its dead-letter hook's), in order, for buffered
   * adapters; interactive adapters already received them through `write()` and get none here.
   */
  writes: readonly Write[];
}

/** What `commit` applies. */
export interface Changes {
  /** Writes not handed over yet, in order (all of a buffered plain transaction's). */
  writes: readonly Write[];
  /** One per claimed schedule, in claim order (empty for a unit without a claim). */
  settlements: readonly Settlement[];
}

/** Which schedules `listSchedules` returns, in which order. */
export interface ListQuery {
  /**
   * `at`: by deadline, then key. `due`: by `dueAt`, then key. `key`: by key (an adapter whose engine keeps
   * no deadline order may answer every query in key order and declare it, see {@link StoreAdapter.order}).
   */
  order: 'at' | 'due' | 'key';
  /** Only those whose ordering instant (`at`, or `dueAt` for `due`) is at or before this. */
  through?: Date;
  /** Only keys that start with this literal prefix. */
  prefix?: string;
  /** Strictly after this position in the order (`at` is the ordering instant, ignored for `key`). */
  after?: { at: number; key: string };
  /**
   * Only schedules with (`true`) or without (`false`) a recurrence: a stored state for which
   * `isOneShot(state)` is false (a one-shot schedule's operator state, such as a pause, does not count).
   * Adapters decide it when they store the state (a flag beside it) and never parse it back for a list.
   */
  recurring?: boolean;
  /**
   * `heads`: the caller needs no message (counts, due checks): an adapter may leave out `message`,
   * `lastError` and `recurrence` and read less. Returning whole schedules is always correct.
   */
  select?: 'all' | 'heads';
  /**
   * With whole schedules (`select` not `heads`): cut each message's data for display. The adapter may
   * return the message without `data` and, when it had data, `dataPreview`: the data's JSON text, its first
   * `preview` characters (Unicode code points), and whether it was cut — computed by the engine, so a page
   * of large messages reads at most that much of each. Returning whole messages is always correct: core
   * cuts what comes back without `dataPreview` (see {@link ScheduleQuery.preview}).
   */
  preview?: number;
  limit: number;
}

/** A schedule without its payload (see {@link ListQuery.select}). */
export type ScheduleHead = Pick<Schedule, 'key' | 'at' | 'dueAt' | 'version' | 'attempts'> &
  Partial<Pick<Schedule, 'message' | 'lastError' | 'recurrence'>>;

/** Which dead letters `listDeadLetters` returns: by key. */
export interface DeadLetterListQuery {
  /** Only keys that start with this literal prefix. */
  prefix?: string;
  /** Strictly after this key. */
  after?: string;
  /** Cut each message's data for display, as {@link ListQuery.preview} does. */
  preview?: number;
  limit: number;
}

/**
 * What a push channel reports (see {@link StoreAdapter.watch}). `live` is sent when the channel is
 * connected (first, and again after each reconnection): from then on, commits of other processes are
 * reported, so a dispatcher can sleep until its next known deadline; core looks at the store once at each
 * `live`, since changes made while the channel was down were not reported. `lost` says the channel is down.
 */
export type WatchEvent = { type: 'change'; earliest?: Date } | { type: 'live' } | { type: 'lost' };

/**
 * The store part of a backend. Inputs are validated by core; reads return fresh objects the caller may
 * keep. Errors: a lost optimistic check is a `ConflictError`; anything else throws (preferably a
 * `BackendError` naming the operation) and is never reported as a conflict.
 *
 * @typeParam Sql The handle of the application's own queries (`tx.sql`), `undefined` on non-SQL backends.
 * @typeParam U The adapter's unit of work.
 */
export interface StoreAdapter<Sql = unknown, U extends Unit<Sql> = Unit<Sql>> {
  /**
   * Opens a unit of work. With `claim`, the unit also claims up to `claim.limit` active schedules with
   * `dueAt <= claim.now`, in (`dueAt`, `key`) order, into `unit.claimed` (empty when none is due; core
   * still ends the unit). Claims:
   * - are exclusive: a claimed version is in no other open unit's `claimed` (row locks, claim records,
   *   consumer acknowledgements) — unless the backend declares `exclusiveClaims: false`, and then exactly
   *   one of the units that claimed a version may consume it;
   * - survive the claiming process: a version whose claim was never settled (the process died) is claimed
   *   again once its claim has lapsed, with `interrupted: true`;
   * - end with `commit` (as settled) or `rollback` (released unchanged).
   */
  begin(claim?: ClaimRequest): Promise<U>;
  /**
   * Interactive adapters only: applies `writes` inside the open unit now (or, for a write that cannot
   * fail, with the unit's next statement: a read through the unit must see it). Returns, per write, how
   * many schedules or dead letters it changed (a `put` counts 1; a `delete`, 0 or 1; a `deletePrefix`, how
   * many; a `deleteDead`, 0 or 1; an `append`, its events). Its presence makes the adapter interactive.
   */
  write?(unit: U, writes: readonly Write[]): Promise<number[]>;
  /**
   * Interactive adapters (required with `write`): runs `fn` (one processor and its writes) in a savepoint
   * of `unit`.
   * When `fn` throws, everything it did through the unit since is undone, and the error is rethrown; the
   * unit stays usable. Also throws when `fn` left the unit unusable (on PostgreSQL, a failed statement the
   * processor caught). A savepoint may be taken lazily, at the part's first statement.
   */
  part?<T>(unit: U, fn: () => Promise<T>): Promise<T>;
  /**
   * Interactive adapters: whether `unit` takes statements from several processors at once (the
   * dispatcher's `pipeline` option runs a batch's processors together in one `part`). Say so when its
   * `sql` handle queues or pipelines statements sent without waiting (a pipelining connection, a
   * synchronous driver); absent or false, processors run one by one.
   */
  concurrent?(unit: U): boolean;
  /**
   * Applies `changes` and ends the unit. Interactive adapters commit everything or throw (their claims
   * are held, so settlements cannot conflict). Buffered adapters apply the plain writes as one group and
   * each settlement with its writes as one group, each all or nothing, in order; a settlement whose
   * `consume` finds the key no longer at the claimed version, or whose `append` finds its stream moved on,
   * is left out, and its error (a `ConflictError`) is returned under its key. The other groups still
   * apply. A buffered plain transaction's conflict is thrown.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: an adapter without rejections returns nothing
  commit(unit: U, changes: Changes): Promise<ReadonlyMap<string, Error> | void>;
  /** Ends the unit without applying anything; claimed schedules stay as they were, claimed no longer. */
  rollback(unit: U): Promise<void>;
  /**
   * Interactive SQL adapters that can work inside a transaction the application opened itself (its ORM's,
   * its driver's): returns a unit on `handle` (an executor of that transaction, whose shape the adapter
   * documents) without beginning anything. The adapter must check that `handle` is usable (an open
   * transaction) and refuse it with an `InvalidArgumentError` naming `handle` otherwise. On such a unit,
   * `commit` applies the writes left and ends the unit without committing: the application's commit
   * commits them, its rollback discards them. `rollback` undoes what the unit wrote (take a savepoint when
   * the unit starts) and leaves the application's transaction open and usable.
   */
  join?(handle: unknown): Promise<U>;
  /**
   * Adapters whose claims lapse by time (no lock held by a live connection): extends the claims `unit`
   * still holds. Core calls it every {@link renewEveryMs} while processors run.
   */
  renew?(unit: U): Promise<void>;
  /** How often core calls `renew`, in ms (required with `renew`). */
  readonly renewEveryMs?: number;
  /** The schedule under `key` (inside `unit` when given: it sees the unit's writes so far). */
  loadSchedule(key: string, unit?: U): Promise<Schedule | undefined>;
  /** An aggregate's events in sequence order, empty when it has none (inside `unit` when given). */
  loadEvents(aggregateId: string, unit?: U): Promise<Event[]>;
  /** Active schedules matching `query`, in its order, at most `query.limit` (inside `unit` when given). */
  listSchedules(query: ListQuery, unit?: U): Promise<ScheduleHead[]>;
  /** Dead letters matching `query`, by key, at most `query.limit`. */
  listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]>;
  /**
   * Optional: how many active schedules `query` matches, counted up to `query.limit` (return at most
   * that). Without it, core counts by listing heads a page at a time; an engine that can count without
   * reading rows (an index-only count) answers status pages faster with it.
   */
  countSchedules?(query: Omit<ListQuery, 'after' | 'select' | 'preview'>): Promise<number>;
  /**
   * Optional: the backlog of schedules due now, as the engine delivers them: how many (up to
   * `query.limit`; return at most that) and the earliest due time among them. For an engine that keeps
   * the time itself (`dueByWatch`: a timer per schedule) and can tell it from the timers that fired and
   * were not consumed, without reading schedules. Without it, core counts the schedules due by
   * `query.now` and reads the first of the due order.
   */
  dueBacklog?(query: { now: Date; limit: number }): Promise<DueBacklog>;
  /**
   * Optional: how many dead letters there are (under `query.prefix`), counted up to `query.limit` (return
   * at most that). Without it, core counts by listing dead letters a page at a time, payloads included; an
   * engine that counts keys on an index (a bounded `count(*)` over `LIMIT`) reads no payload.
   */
  countDeadLetters?(query: { prefix?: string; limit: number }): Promise<number>;
  /**
   * Optional push channel: reports other processes' commits of schedule changes (see {@link WatchEvent}).
   * Returns an unsubscribe function. Core subscribes once per store, however many listen.
   */
  watch?(listener: (event: WatchEvent) => void): () => void;
  /**
   * The orders this adapter answers `listSchedules` in (default all three). An adapter without a deadline
   * index (`['key']`) gets `at` and `due` queries answered in key order; core then does not rely on the
   * due order to find the next deadline and needs a push channel that reports schedules as they fall
   * due.
   */
  readonly order?: readonly ListQuery['order'][];
  /**
   * The engine keeps each schedule's due time itself (a timer per schedule, such as a JetStream message
   * schedule) and `watch` reports each as it falls due (`change` with `earliest`, the due instant). Core's
   * dispatchers then never ask `listSchedules` for the next deadline (which such an engine could only
   * answer by reading every schedule) and sleep until a change comes, looking again every
   * `watchedRescanInterval`. `store.nextDueAt()` still asks, for whoever calls it.
   */
  readonly dueByWatch?: boolean;
  /** Limits of the engine that core respects. */
  readonly limits?: {
    /** Most schedules one delivery may claim (the dispatcher's `batchSize` is capped at it). */
    claim?: number;
  };
}
