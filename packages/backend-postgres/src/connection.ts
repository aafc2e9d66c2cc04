import { createHash } from 'node:crypto';
import { backoff, type Clock, ClosedError, DuetimeError, type Logger, retry } from '@duetime/core';
import type pg from 'pg';
import { coalesceWrites } from './coalesce.js';
import { type ConnectionTarget, isConnectionLost, toDuetimeError } from './errors.js';

/**
 * Where the backend's statements go: the pool, a connection inside a transaction, or (later) another
 * library's transaction. One method, so that any executor of a PostgreSQL session can be plugged in.
 */
export interface PostgresExecutor {
  /** `name`: the statement's prepared-statement name, when prepared statements are on (see `SqlExecutor`). */
  query<R = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
    name?: string,
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

type Result<R> = { rows: R[]; rowCount: number | null };
const NUMBERS = new Set([20, 21, 23, 700, 701, 1700]); // int8, int2, int4, float4, float8, numeric

/**
 * Result parsing that ignores the application's global pg type parsers (an app may map `int8` to BigInt
 * or `timestamptz` to strings): numbers as numbers, booleans as booleans, everything else as text
 * (instants are read as epoch milliseconds computed in SQL, JSON is parsed by duetime).
 */
export const RAW_TYPES = {
  getTypeParser: (oid: number) =>
    NUMBERS.has(oid) ? Number : oid === 16 ? (value: string) => value === 't' : (value: string) => value,
} as unknown as pg.CustomTypesConfig;

/** The pool, what it points at, and the executors every part of the backend runs its SQL through. */
export class Connection {
  readonly pool: pg.Pool;
  readonly target: ConnectionTarget;
  readonly logger: Logger;
  /** The executor on the pool. */
  readonly exec: PostgresExecutor;
  readonly #secret: string | undefined;
  readonly #ownsPool: boolean;
  readonly #clock: Clock;
  /** Statement names by text, when prepared statements are on (names are per connection). */
  readonly #names: Map<string, string> | undefined;
  readonly #prefix: string;
  readonly #guarded = new WeakSet<pg.Client>();
  #closed = false;

  readonly #onPoolError = (error: Error) =>
    this.logger.warn('an idle PostgreSQL connection failed; the pool replaces it', {
      error: this.error(error, 'idle connection'),
    });
  /**
   * pg-pool hands a client to a waiting caller with no error listener for a moment; a connection
   * terminated then would emit an unheard `error` and crash the process: every client gets one for good.
   */
  readonly #guard = (client: pg.Client) => {
    if (this.#guarded.has(client)) return;
    this.#guarded.add(client);
    client.on('error', (error) =>
      this.logger.debug('a PostgreSQL connection failed', { error: error.message }),
    );
  };

  constructor(options: {
    pool: pg.Pool;
    ownsPool: boolean;
    target: ConnectionTarget;
    secret: string | undefined;
    logger: Logger;
    clock: Clock;
    preparedStatements: boolean;
  }) {
    this.pool = options.pool;
    this.target = options.target;
    this.logger = options.logger;
    this.#secret = options.secret;
    this.#ownsPool = options.ownsPool;
    this.#clock = options.clock;
    this.#names = options.preparedStatements ? new Map() : undefined;
    // The schema's hash keeps two backends sharing a pool apart.
    this.#prefix = `duetime_${createHash('sha256').update(options.target.schema).digest('hex').slice(0, 10)}_`;
    // Without a listener, an idle client that loses its connection would crash the process.
    this.pool.on('error', this.#onPoolError);
    this.pool.on('connect', this.#guard);
    this.pool.on('acquire', this.#guard);
    this.exec = this.executor(this.pool);
  }

  get closed(): boolean {
    return this.#closed;
  }

  check(): void {
    if (this.#closed) throw new ClosedError('postgres backend');
  }

  /** An executor on `on` (the pool, or a client), reading results with {@link RAW_TYPES}. */
  executor(on: Pick<pg.Pool | pg.ClientBase, 'query'>): PostgresExecutor {
    return {
      query: async <R>(text: string, params: readonly unknown[] = []) => {
        this.check();
        const config: pg.QueryConfig = { text, values: params as unknown[], types: RAW_TYPES };
        const name = this.statementName(text);
        if (name !== undefined) config.name = name;
        return (await on.query(config)) as unknown as Result<R>;
      },
    };
  }

  /**
   * The prepared-statement name of `text` when prepared statements are on (the `preparedStatements`
   * option), else undefined: the same name for the same text, with the schema's hash in it. Handed to the
   * application's executors too (a join's statements), whose driver may prepare them once per connection.
   */
  statementName(text: string): string | undefined {
    if (!this.#names) return undefined;
    let name = this.#names.get(text);
    if (!name) {
      name = this.#prefix + createHash('sha256').update(text).digest('hex').slice(0, 16);
      this.#names.set(text, name);
    }
    return name;
  }

  /** Maps a pg error to a duetime error naming `operation` and the target. */
  error(error: unknown, operation: string): Error {
    return toDuetimeError(error, operation, this.target, this.#secret);
  }

  /** Runs one statement on `exec` (the pool by default), mapping errors. */
  async query<R>(
    operation: string,
    text: string,
    params: readonly unknown[] = [],
    exec: PostgresExecutor = this.exec,
  ): Promise<Result<R>> {
    try {
      return await exec.query<R>(text, params, this.statementName(text));
    } catch (error) {
      throw this.error(error, operation);
    }
  }

  /**
   * Retries `attempt` a few times (50 ms, then 200 ms of the backend's clock) while the connection was lost
   * and the backend is open; other errors surface at once, mapped to duetime errors.
   */
  #whileConnectionLost<T>(operation: string, attempt: () => Promise<T>): Promise<T> {
    const lost = (error: unknown) => !this.#closed && isConnectionLost(error);
    return retry(
      async () => {
        this.check();
        try {
          return await attempt();
        } catch (error) {
          throw lost(error) ? error : this.error(error, operation);
        }
      },
      {
        clock: this.#clock,
        attempts: 3,
        // Errors already mapped above are final; only a raw lost-connection error is retried.
        retryIf: (error) => !(error instanceof DuetimeError) && lost(error),
        delayMs: backoff({ initialMs: 50, factor: 4 }),
        onGiveUp: (error) => this.error(error, operation),
      },
    );
  }

  /** Runs an idempotent statement on the pool, retried a few times when the connection was lost. */
  idempotent<R>(operation: string, text: string, params: readonly unknown[] = []): Promise<Result<R>> {
    return this.#whileConnectionLost(operation, () => this.exec.query<R>(text, params));
  }

  /** Checks a client out of the pool for a transaction (retried a few times when none can be made). */
  checkout(operation: string): Promise<CheckedOutClient> {
    return this.#whileConnectionLost(operation, async () => new CheckedOutClient(await this.pool.connect()));
  }

  /** Closes the pool if this backend created it; the application's pool is left as it is. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.pool.off('error', this.#onPoolError);
    this.pool.off('connect', this.#guard);
    this.pool.off('acquire', this.#guard);
    if (this.#ownsPool) await this.pool.end();
  }
}

/**
 * A pool client checked out for one transaction, with an error listener while it is out (pg emits
 * `error` on a checked-out client whose socket dies). `release` is safe to call more than once.
 */
export class CheckedOutClient {
  readonly client: pg.PoolClient;
  #broken = false;
  #released = false;
  readonly #onError = () => {
    this.#broken = true;
  };

  constructor(client: pg.PoolClient) {
    this.client = client;
    client.on('error', this.#onError);
    coalesceWrites(client);
  }

  /** Rolls back, destroying the connection when that fails (its state is unknown). */
  async rollback(): Promise<void> {
    if (this.#released) return;
    try {
      if (!this.#broken) await this.client.query('ROLLBACK');
      this.release(false);
    } catch {
      this.release(true);
    }
  }

  release(destroy: boolean): void {
    if (this.#released) return;
    this.#released = true;
    // A broken one keeps its listener: a late socket error must not go unheard.
    if (!destroy && !this.#broken) this.client.off('error', this.#onError);
    this.client.release(destroy || this.#broken);
  }
}
