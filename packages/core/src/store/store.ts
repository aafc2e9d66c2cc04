import type { ClaimRequest, StoreAdapter, Unit, WatchEvent } from '../backend/contract.js';
import { type Clock, systemClock } from '../clock.js';
import { ClosedError, ConflictError, InvalidArgumentError, NotSupportedError } from '../errors.js';
import { defaultLogger, type Logger } from '../logger.js';
import { identifier, positiveInteger, scheduleKey, schedulePrefix } from '../validate.js';
import type { Aggregate, AggregateContext } from './aggregate.js';
import { Delivery } from './delivery.js';
import {
  countDeadLetters,
  countLimit,
  countSchedulePages,
  pageLimit,
  previewLength,
  scheduleFilters,
  withPreview,
} from './paging.js';
import { CoreTransaction } from './transaction.js';
import { workOf } from './work.js';

export { validMessage } from './message.js';

import type { ResumeResult } from './operations.js';
import type { CatchUp, Recurrence } from './recurrence.js';
import type {
  DeadLetterPage,
  DeadLetterQuery,
  DeadLetterRecord,
  DueBacklog,
  Event,
  Message,
  Schedule,
  ScheduleCountQuery,
  SchedulePage,
  ScheduleQuery,
  StoreChange,
} from './types.js';

/**
 * The work done inside `store.transact`. Everything it does commits together, or nothing does.
 * `Sql` is the backend's handle for the application's own queries (`tx.sql`): the better-sqlite3
 * `Database` on SQLite, the `pg` client inside `BEGIN … COMMIT` on PostgreSQL, `undefined` elsewhere.
 */
export interface Transaction<Sql = unknown> {
  /** The backend's handle for the application's own queries inside this transaction. */
  readonly sql: Sql;
  /**
   * Loads the aggregate `id`, runs `command` against its state and appends the events it raises, with an
   * optimistic check on the stream's sequence. Returns the new state.
   */
  exec<S>(
    aggregate: Aggregate<S>,
    id: string,
    command: (state: S, ag: AggregateContext<S>) => void | Promise<void>,
  ): Promise<S>;
  /**
   * Creates the schedule under `key`, or replaces it with a new version: one-shot at `at`, or recurring
   * when given a {@link recurring} recurrence (delivered at each occurrence; each occurrence is a new
   * version, armed in the commit that consumes the previous one).
   */
  schedule(key: string, at: Date | Recurrence, message: Message): Promise<void>;
  /** Cancels the schedule under `key`; a no-op when there is none. Returns whether one was cancelled. */
  cancelSchedule(key: string): Promise<boolean>;
  /** Cancels every active schedule whose key starts with `prefix` (literally). Returns how many. */
  cancelSchedulePrefix(prefix: string): Promise<number>;
  /**
   * Schedules the dead letter under `key` again (attempts start over) at `options.at` (default now), under
   * its own key or `options.asKey`, and removes the dead letter. Returns false when there is none.
   * @throws {ConflictError} (kind `schedule`) when the target key has an active schedule (a recurrence's
   *   next occurrence, or a newer schedule): retry under another key with `asKey`, or cancel it first.
   */
  retryDeadLetter(key: string, options?: { at?: Date; asKey?: string }): Promise<boolean>;
  /** Removes the dead letter under `key`. Returns whether there was one. */
  discardDeadLetter(key: string): Promise<boolean>;
  /**
   * Reads a schedule as this transaction sees it (its own changes included). On backends that assign
   * versions at commit (key-value stores), a schedule created in this transaction shows version 0.
   */
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /** Reads an aggregate's events as this transaction sees them. */
  loadEvents(aggregateId: string): Promise<Event[]>;
  /**
   * Pauses the schedule under `key`: its own deliveries wait (a recurrence keeps its count, bounds and
   * place on its grid) until {@link resumeSchedule}; queued deliveries (triggers, backfills) still run.
   * A one-shot schedule can be paused too. Returns false when it was paused already (nothing changes).
   * @throws {NotFoundError} when no schedule is active under `key`.
   */
  pauseSchedule(key: string, options?: { note?: string }): Promise<boolean>;
  /**
   * Resumes a paused schedule. A recurrence applies its catch-up rule — or `options.catchUp` for this
   * resume — to the occurrences that fell due while it was paused: those it runs are queued (delivered
   * at once, oldest first, each with the occurrence id it would have had), the others are reported in the
   * result; its grid goes on from the next occurrence. Resuming a schedule that is not paused changes
   * nothing (`resumed: false`).
   * @throws {NotFoundError} when no schedule is active under `key`.
   */
  resumeSchedule(key: string, options?: { catchUp?: CatchUp }): Promise<ResumeResult>;
  /**
   * Queues one extra delivery of the schedule's message, now or at `options.at`, with an occurrence id of
   * its own (returned): it runs even while the schedule is paused, does not move its grid and does not
   * count toward `maxOccurrences`.
   * @throws {NotFoundError} when no schedule is active under `key`.
   */
  triggerSchedule(key: string, options?: { at?: Date }): Promise<string>;
  /**
   * Skips the next `n` occurrences (default 1) of a recurring schedule: each is reported as missed
   * (reason `skipped`) when it falls due, not run and not counted. Returns how many are now to be skipped.
   * @throws {NotFoundError} when no schedule is active under `key`; {@link InvalidArgumentError} for a
   *   one-shot schedule.
   */
  skipNext(key: string, n?: number): Promise<number>;
  /**
   * Queues the occurrences of a recurring schedule's spec in `[from, to)` (at most 1,000 per call),
   * delivered oldest first, each with the occurrence id it had (an idempotent processor that ran one
   * already can tell); they do not move the grid nor count toward `maxOccurrences`. Returns the instants.
   * @throws {NotFoundError} when no schedule is active under `key`; {@link InvalidArgumentError} for a
   *   one-shot schedule, `from >= to`, an invalid date or a range of more than 1,000 occurrences.
   */
  backfillSchedule(key: string, range: { from: Date; to: Date }): Promise<Date[]>;
}

export interface TransactOptions {
  /** How many times to re-run the function after an optimistic conflict (default 10). */
  maxRetries?: number;
}

/** Atomic transactions over aggregates' events and schedules, and reads of both. */
export interface Store<Sql = unknown> {
  /**
   * Runs `fn` in one atomic unit and returns its result. A thrown error commits nothing and is rethrown.
   * On an optimistic conflict the function runs again (bounded), so it must not have side effects
   * outside the transaction.
   */
  transact<T>(fn: (tx: Transaction<Sql>) => T | Promise<T>, options?: TransactOptions): Promise<T>;
  /**
   * Runs `fn` inside a transaction the application opened itself — its ORM's or driver's — and returns its
   * result: what `fn` does through `tx` commits when the application's transaction commits and is discarded
   * when it rolls back. `handle` is what the backend joins (on PostgreSQL an executor of the transaction,
   * made by `@duetime/sql-bindings` for Drizzle, Kysely, Knex, TypeORM, Prisma, postgres.js, pg, PGlite).
   * When `fn` throws, what it wrote is undone (a savepoint), the application's transaction stays usable and
   * the error is rethrown; an optimistic conflict is rethrown too (the application re-runs its transaction).
   * Dispatchers wake when the application commits.
   * @throws {NotSupportedError} when the backend cannot join an outside transaction.
   * @throws {InvalidArgumentError} when `handle` is not an open transaction the backend can join.
   */
  join<T>(handle: unknown, fn: (tx: Transaction<Sql>) => T | Promise<T>): Promise<T>;
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /**
   * Every active schedule with a deadline at or before `through` (all when `undefined`), ordered by
   * deadline. Reads page by page; for very large sets use {@link Store.pageSchedules} or
   * {@link Store.iterateSchedules}, which never hold the whole set.
   */
  listSchedules(through?: Date): Promise<Schedule[]>;
  /** One page of active schedules ordered by deadline (or due time) then key. */
  pageSchedules(query?: ScheduleQuery): Promise<SchedulePage>;
  /**
   * How many active schedules match `query`, counted up to `query.limit` (default 10,000) without reading
   * their messages: a result equal to the limit means "at least that many".
   */
  countSchedules(query?: ScheduleCountQuery): Promise<number>;
  /** The earliest time an active schedule is due (`dueAt`), when the backend keeps a due order. */
  nextDueAt(): Promise<Date | undefined>;
  /**
   * The backlog a dispatcher faces now: how many schedules are due (counted up to `limit`, default
   * 10,000) and the earliest due time among them. What a status page polls. A backend whose engine keeps
   * the time (NATS: a JetStream timer per schedule) answers from the timers that fired and were not
   * consumed yet, reading no schedule; the others count the schedules due by the store's clock and read
   * the first of the due order (as `countSchedules` and `nextDueAt`).
   */
  dueBacklog(query?: { limit?: number }): Promise<DueBacklog>;
  /** The dead letter kept under `key`, if any. */
  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined>;
  /** One page of dead letters ordered by key (see {@link DeadLetterRecord}). */
  pageDeadLetters(query?: DeadLetterQuery): Promise<DeadLetterPage>;
  /** How many dead letters there are (under `prefix`), counted up to `limit` (default 10,000). */
  countDeadLetters(query?: { prefix?: string; limit?: number }): Promise<number>;
  /** Iterates active schedules page by page. */
  iterateSchedules(query?: Omit<ScheduleQuery, 'after'>): AsyncIterable<Schedule>;
  /**
   * Listens to schedule changes: local commits and, where the backend has a push channel, remote ones
   * (and the channel's state, see {@link StoreChange.channel}).
   */
  onChange(listener: (change: StoreChange) => void): () => void;
  /** True while the backend's push channel is connected (other processes' commits are being reported). */
  readonly watching: boolean;
  /** The clock the store stamps events with and the dispatcher runs on. */
  readonly clock: Clock;
  readonly logger: Logger;
  /** The name of the backend underneath (`sqlite`, `postgres`, …). */
  readonly backendName: string;
  close(): Promise<void>;
}

export interface StoreOptions {
  clock?: Clock;
  logger?: Logger;
  /** The backend's name (default `custom`). */
  name?: string;
  /** Throws once the backend is closed (default: the store's own closed state). */
  check?: () => void;
}

/**
 * Opens a delivery on a store made by {@link createStore}: claims up to `limit` due schedules. For the
 * dispatcher; applications never need it.
 */
export const openDelivery = Symbol('duetime.openDelivery');
/** The most schedules one delivery may claim on a store, when its backend has a limit. */
export const claimLimit = Symbol('duetime.claimLimit');
/** Whether a store's backend keeps schedules in due order (it can tell the next deadline). */
export const knowsDueOrder = Symbol('duetime.knowsDueOrder');
/** Whether a store's engine reports schedules as they fall due (its dispatchers do not ask for the next). */
export const dueByWatch = Symbol('duetime.dueByWatch');

/** A store made by {@link createStore}, with what core's dispatcher uses besides the public API. */
export interface CoreStoreInternals<Sql> {
  [openDelivery](claim: ClaimRequest): Promise<Delivery<Sql>>;
  readonly [claimLimit]: number | undefined;
  readonly [knowsDueOrder]: boolean;
  readonly [dueByWatch]: boolean;
}

/**
 * Builds the public {@link Store} over a backend's {@link StoreAdapter}. Backends get it from
 * `defineBackend`; applications get a Backend.
 */
export function createStore<Sql, U extends Unit<Sql>>(
  adapter: StoreAdapter<Sql, U>,
  options: StoreOptions = {},
): Store<Sql> {
  return new CoreStore(adapter as StoreAdapter<Sql, Unit<Sql>>, options);
}

/** Whether `store` was made by {@link createStore} (so a dispatcher can deliver from it). */
export function isCoreStore<Sql>(store: unknown): store is Store<Sql> & CoreStoreInternals<Sql> {
  return store instanceof CoreStore;
}

class CoreStore<Sql> implements Store<Sql>, CoreStoreInternals<Sql> {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly backendName: string;
  readonly #adapter: StoreAdapter<Sql, Unit<Sql>>;
  readonly #check: () => void;
  readonly #listeners = new Set<(change: StoreChange) => void>();
  #unwatch: (() => void) | undefined;
  #watching = false;
  #closed = false;

  constructor(adapter: StoreAdapter<Sql, Unit<Sql>>, options: StoreOptions) {
    this.#adapter = adapter;
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? defaultLogger;
    this.backendName = options.name ?? 'custom';
    this.#check = options.check ?? (() => {});
  }

  get [claimLimit](): number | undefined {
    return this.#adapter.limits?.claim;
  }

  get [knowsDueOrder](): boolean {
    return this.#adapter.order === undefined || this.#adapter.order.includes('due');
  }

  get [dueByWatch](): boolean {
    return this.#adapter.dueByWatch === true;
  }

  get watching(): boolean {
    return this.#watching;
  }

  #open(): void {
    if (this.#closed) throw new ClosedError('store');
    this.#check();
  }

  async transact<T>(fn: (tx: Transaction<Sql>) => T | Promise<T>, options: TransactOptions = {}): Promise<T> {
    this.#open();
    if (typeof fn !== 'function')
      throw new InvalidArgumentError('fn', fn, 'must be a function (tx) => result');
    const maxRetries = positiveInteger('options.maxRetries', options.maxRetries ?? 10, { allowZero: true });
    for (let attempt = 0; ; attempt++) {
      const unit = await this.#adapter.begin();
      const work = workOf(this.#adapter, unit);
      const tx = new CoreTransaction<Sql>(work, this.clock);
      let result: T;
      try {
        result = await fn(tx);
        tx.finish();
        await this.#adapter.commit(unit, { writes: work.writes, settlements: [] });
      } catch (error) {
        tx.finish();
        await this.#adapter.rollback(unit).catch((rollbackError: unknown) => {
          this.logger.warn('rollback failed', { error: rollbackError });
        });
        const retriable = error instanceof ConflictError && error.kind !== 'schedule';
        if (retriable && attempt < maxRetries) {
          await new Promise((resolve) => setTimeout(resolve, backoff(attempt)));
          continue;
        }
        throw error;
      }
      if (tx.scheduled)
        this.#emit({
          remote: false,
          ...(tx.earliest !== undefined ? { earliest: new Date(tx.earliest) } : {}),
        });
      return result;
    }
  }

  async join<T>(handle: unknown, fn: (tx: Transaction<Sql>) => T | Promise<T>): Promise<T> {
    this.#open();
    if (typeof fn !== 'function')
      throw new InvalidArgumentError('fn', fn, 'must be a function (tx) => result');
    if (!this.#adapter.join)
      throw new NotSupportedError(
        `the ${this.backendName} backend cannot join a transaction the application opened; use store.transact`,
      );
    const unit = await this.#adapter.join(handle);
    const work = workOf(this.#adapter, unit);
    const tx = new CoreTransaction<Sql>(work, this.clock);
    let result: T;
    try {
      result = await fn(tx);
      tx.finish();
      await this.#adapter.commit(unit, { writes: work.writes, settlements: [] });
    } catch (error) {
      tx.finish();
      await this.#adapter.rollback(unit).catch((rollbackError: unknown) => {
        this.logger.warn("undoing a joined transaction's writes failed", { error: rollbackError });
      });
      throw error;
    }
    if (tx.scheduled)
      this.#emit({
        remote: false,
        ...(tx.earliest !== undefined ? { earliest: new Date(tx.earliest) } : {}),
      });
    return result;
  }

  async [openDelivery](claim: ClaimRequest): Promise<Delivery<Sql>> {
    this.#open();
    const unit = await this.#adapter.begin(claim);
    return new Delivery(this.#adapter, unit, this.clock, this.logger, (change) =>
      this.#emit({ ...change, remote: false }),
    );
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#open();
    return this.#adapter.loadEvents(identifier('aggregateId', aggregateId));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#open();
    return this.#adapter.loadSchedule(scheduleKey(key));
  }

  async listSchedules(through?: Date): Promise<Schedule[]> {
    const all: Schedule[] = [];
    for await (const s of this.iterateSchedules(through === undefined ? {} : { through })) all.push(s);
    return all;
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    this.#open();
    scheduleKey(key);
    const [found] = await this.#adapter.listDeadLetters({ prefix: key, limit: 1 });
    return found?.key === key ? found : undefined;
  }

  async pageDeadLetters(query: DeadLetterQuery = {}): Promise<DeadLetterPage> {
    this.#open();
    const limit = pageLimit(query.limit);
    const prefix = query.prefix === undefined ? undefined : schedulePrefix(query.prefix);
    const after = query.after === undefined ? undefined : scheduleKey(query.after);
    const preview = previewLength(query.preview);
    const items = await this.#adapter.listDeadLetters({
      limit,
      ...(prefix !== undefined ? { prefix } : {}),
      ...(after !== undefined ? { after } : {}),
      ...(preview !== undefined ? { preview } : {}),
    });
    if (preview !== undefined) for (const item of items) withPreview(item, preview);
    const last = items.at(-1);
    return items.length === limit && last ? { items, next: last.key } : { items };
  }

  async countDeadLetters(query: { prefix?: string; limit?: number } = {}): Promise<number> {
    this.#open();
    const limit = countLimit(query.limit);
    const prefix = query.prefix === undefined ? undefined : schedulePrefix(query.prefix);
    return countDeadLetters(this.#adapter, prefix, limit);
  }

  async pageSchedules(query: ScheduleQuery = {}): Promise<SchedulePage> {
    this.#open();
    const limit = pageLimit(query.limit);
    const filters = scheduleFilters(query, this.#adapter.order);
    const after = query.after;
    if (after !== undefined && (typeof after?.at !== 'number' || typeof after?.key !== 'string'))
      throw new InvalidArgumentError('query.after', after, 'must be the `next` cursor of a previous page');
    const preview = previewLength(query.preview);
    const items = (await this.#adapter.listSchedules({
      ...filters,
      limit,
      ...(after ? { after: { at: after.at, key: after.key } } : {}),
      ...(preview !== undefined ? { preview } : {}),
    })) as Schedule[];
    if (preview !== undefined) for (const item of items) withPreview(item, preview);
    const last = items.at(-1);
    if (items.length < limit || !last) return { items };
    const position = filters.order === 'due' ? last.dueAt : filters.order === 'key' ? new Date(0) : last.at;
    return { items, next: { at: position.getTime(), key: last.key } };
  }

  async countSchedules(query: ScheduleCountQuery = {}): Promise<number> {
    this.#open();
    const limit = countLimit(query.limit);
    const filters = scheduleFilters(query, this.#adapter.order);
    if (this.#adapter.countSchedules)
      return Math.min(limit, await this.#adapter.countSchedules({ ...filters, limit }));
    return countSchedulePages(this.#adapter, filters, limit);
  }

  async nextDueAt(): Promise<Date | undefined> {
    this.#open();
    if (!this[knowsDueOrder]) return undefined;
    const [first] = await this.#adapter.listSchedules({ order: 'due', select: 'heads', limit: 1 });
    return first?.dueAt;
  }

  async dueBacklog(query: { limit?: number } = {}): Promise<DueBacklog> {
    this.#open();
    if (typeof query !== 'object' || query === null)
      throw new InvalidArgumentError('query', query, 'must be an object { limit? }');
    const limit = countLimit(query.limit);
    const now = new Date(this.clock.now());
    if (this.#adapter.dueBacklog) {
      const backlog = await this.#adapter.dueBacklog({ now, limit });
      const count = Math.min(limit, backlog.count);
      return count > 0 && backlog.oldest ? { count, oldest: new Date(backlog.oldest) } : { count };
    }
    const [count, first] = await Promise.all([
      this.countSchedules({ order: 'due', through: now, limit }),
      this.nextDueAt(),
    ]);
    return count > 0 && first !== undefined && first <= now ? { count, oldest: first } : { count };
  }

  async *iterateSchedules(query: Omit<ScheduleQuery, 'after'> = {}): AsyncIterable<Schedule> {
    let page = await this.pageSchedules(query);
    for (;;) {
      yield* page.items;
      if (!page.next) return;
      page = await this.pageSchedules({ ...query, after: page.next });
    }
  }

  onChange(listener: (change: StoreChange) => void): () => void {
    this.#listeners.add(listener);
    if (!this.#unwatch && this.#adapter.watch) {
      this.#unwatch = this.#adapter.watch((event) => this.#onWatch(event));
    }
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0 && this.#unwatch) {
        this.#unwatch();
        this.#unwatch = undefined;
        this.#watching = false;
      }
    };
  }

  #onWatch(event: WatchEvent): void {
    if (event.type === 'change') {
      this.#emit({ remote: true, ...(event.earliest ? { earliest: event.earliest } : {}) });
      return;
    }
    this.#watching = event.type === 'live';
    this.#emit({ remote: true, channel: event.type });
  }

  #emit(change: StoreChange): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(change);
      } catch (error) {
        this.logger.warn('store change listener threw', { error });
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#unwatch?.();
    this.#unwatch = undefined;
    this.#watching = false;
    this.#listeners.clear();
  }
}

function backoff(attempt: number): number {
  const base = Math.min(200, 2 ** attempt);
  return base / 2 + Math.random() * base;
}
