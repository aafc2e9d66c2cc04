import { type Clock, systemClock } from '../clock.js';
import { ClosedError, ConflictError, InvalidArgumentError } from '../errors.js';
import { defaultLogger, type Logger } from '../logger.js';
import { identifier, positiveInteger, scheduleKey, schedulePrefix, validDate } from '../validate.js';
import type { Aggregate, AggregateContext } from './aggregate.js';
import type { StoreDriver } from './driver.js';
import { registerAnnouncer } from './internal.js';
import { CoreTransaction } from './transaction.js';

export { validMessage } from './message.js';

import type { Recurrence } from './recurrence.js';
import type {
  DeadLetterPage,
  DeadLetterQuery,
  DeadLetterRecord,
  Event,
  Message,
  Schedule,
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
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  /**
   * Every active schedule with a deadline at or before `through` (all when `undefined`), ordered by
   * deadline. Reads page by page; for very large sets use {@link Store.pageSchedules} or
   * {@link Store.iterateSchedules}, which never hold the whole set.
   */
  listSchedules(through?: Date): Promise<Schedule[]>;
  /** One page of active schedules ordered by deadline then key. */
  pageSchedules(query?: ScheduleQuery): Promise<SchedulePage>;
  /** The dead letter kept under `key`, if any. */
  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined>;
  /** One page of dead letters ordered by key (see {@link DeadLetterRecord}). */
  pageDeadLetters(query?: DeadLetterQuery): Promise<DeadLetterPage>;
  /** Iterates active schedules page by page. */
  iterateSchedules(query?: Omit<ScheduleQuery, 'after'>): AsyncIterable<Schedule>;
  /** Listens to schedule changes: local commits and, where the backend has a push channel, remote ones. */
  onChange(listener: (change: StoreChange) => void): () => void;
  /** The clock the store stamps events with and the dispatcher runs on. */
  readonly clock: Clock;
  readonly logger: Logger;
  /** The driver underneath (for dispatchers and tools; applications should not need it). */
  readonly driver: StoreDriver<Sql>;
  close(): Promise<void>;
}

export interface StoreOptions {
  clock?: Clock;
  logger?: Logger;
}

const DEFAULT_PAGE = 500;
const MAX_PAGE = 10_000;

/** Builds the public {@link Store} over a backend's {@link StoreDriver}. Backends call this; applications get a Backend. */
export function createStore<Sql>(driver: StoreDriver<Sql>, options: StoreOptions = {}): Store<Sql> {
  return new CoreStore(driver, options.clock ?? systemClock, options.logger ?? defaultLogger);
}

class CoreStore<Sql> implements Store<Sql> {
  readonly driver: StoreDriver<Sql>;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly #listeners = new Set<(change: StoreChange) => void>();
  #unwatch: (() => void) | undefined;
  #closed = false;

  constructor(driver: StoreDriver<Sql>, clock: Clock, logger: Logger) {
    this.driver = driver;
    this.clock = clock;
    this.logger = logger;
    registerAnnouncer(this, (change) => this.#emit(change));
  }

  #open(): void {
    if (this.#closed) throw new ClosedError('store');
  }

  async transact<T>(fn: (tx: Transaction<Sql>) => T | Promise<T>, options: TransactOptions = {}): Promise<T> {
    this.#open();
    if (typeof fn !== 'function')
      throw new InvalidArgumentError('fn', fn, 'must be a function (tx) => result');
    const maxRetries = positiveInteger('options.maxRetries', options.maxRetries ?? 10, { allowZero: true });
    for (let attempt = 0; ; attempt++) {
      const driverTx = await this.driver.begin();
      const tx = new CoreTransaction<Sql>(driverTx, this.clock);
      let result: T;
      try {
        result = await fn(tx);
        tx.finish();
        await driverTx.commit();
      } catch (error) {
        tx.finish();
        await driverTx.rollback().catch((rollbackError: unknown) => {
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

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#open();
    return this.driver.loadEvents(identifier('aggregateId', aggregateId));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#open();
    return this.driver.loadSchedule(scheduleKey(key));
  }

  async listSchedules(through?: Date): Promise<Schedule[]> {
    const all: Schedule[] = [];
    for await (const s of this.iterateSchedules(through === undefined ? {} : { through })) all.push(s);
    return all;
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    this.#open();
    return this.driver.loadDeadLetter(scheduleKey(key));
  }

  async pageDeadLetters(query: DeadLetterQuery = {}): Promise<DeadLetterPage> {
    this.#open();
    const limit = pageLimit(query.limit);
    const prefix = query.prefix === undefined ? undefined : schedulePrefix(query.prefix);
    const after = query.after === undefined ? undefined : scheduleKey(query.after);
    const items = await this.driver.listDeadLetters({
      limit,
      ...(prefix !== undefined ? { prefix } : {}),
      ...(after !== undefined ? { after } : {}),
    });
    const last = items.at(-1);
    return items.length === limit && last ? { items, next: last.key } : { items };
  }

  async pageSchedules(query: ScheduleQuery = {}): Promise<SchedulePage> {
    this.#open();
    const limit = pageLimit(query.limit);
    const through = query.through === undefined ? undefined : validDate('through', query.through);
    const prefix = query.prefix === undefined ? undefined : schedulePrefix(query.prefix);
    const after = query.after;
    if (after !== undefined && (typeof after?.at !== 'number' || typeof after?.key !== 'string'))
      throw new InvalidArgumentError('query.after', after, 'must be the `next` cursor of a previous page');
    const items = await this.driver.listSchedules({
      limit,
      ...(through ? { through } : {}),
      ...(prefix !== undefined ? { prefix } : {}),
      ...(after ? { after: { at: after.at, key: after.key } } : {}),
    });
    const last = items.at(-1);
    return items.length === limit && last
      ? { items, next: { at: last.at.getTime(), key: last.key } }
      : { items };
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
    if (!this.#unwatch && this.driver.watch) {
      this.#unwatch = this.driver.watch((change) => this.#emit({ ...change, remote: true }));
    }
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0 && this.#unwatch) {
        this.#unwatch();
        this.#unwatch = undefined;
      }
    };
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
    this.#listeners.clear();
    await this.driver.close();
  }
}

function backoff(attempt: number): number {
  const base = Math.min(200, 2 ** attempt);
  return base / 2 + Math.random() * base;
}

function pageLimit(given: unknown): number {
  const limit = given === undefined ? DEFAULT_PAGE : positiveInteger('query.limit', given);
  if (limit > MAX_PAGE) throw new InvalidArgumentError('query.limit', limit, `must be at most ${MAX_PAGE}`);
  return limit;
}
