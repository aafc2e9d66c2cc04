import { createHash } from 'node:crypto';
import { backoff, type Clock, ClosedError, DuetimeError, type Logger, retry } from '@duetime/core';
import type pg from 'pg';
import { type ConnectionTarget, isConnectionLost, toDuetimeError } from './errors.js';

/**
 * Where every statement of the backend goes: a pool, a connection inside a transaction, or (later) another
 * library's transaction. One method, so that any executor of a PostgreSQL session can be plugged in.
 */
export interface PostgresExecutor {
  query<R extends Record<string, unknown> = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/**
 * Result parsing that ignores the application's global pg type parsers (an app may map `int8` to
 * BigInt or `timestamptz` to strings): duetime reads numbers as numbers, instants as epoch milliseconds
 * computed in SQL, and JSON as text it parses itself.
 */
export const RAW_TYPES = {
  getTypeParser(oid: number): (value: string) => unknown {
    switch (oid) {
      case 20: // int8
      case 21: // int2
      case 23: // int4
      case 700: // float4
      case 701: // float8
      case 1700: // numeric
        return Number;
      case 16: // bool
        return (value) => value === 't';
      default:
        return (value) => value;
    }
  },
} as unknown as pg.CustomTypesConfig;

type Queryable = Pick<pg.Pool | pg.ClientBase, 'query'>;

/** The pool, what it points at, and the executors every part of the backend runs its SQL through. */
export class Connection {
  readonly pool: pg.Pool;
  readonly target: ConnectionTarget;
  readonly logger: Logger;
  readonly #secret: string | undefined;
  readonly #ownsPool: boolean;
  readonly #clock: Clock;
  /** Statement names by text, when prepared statements are on (names are per connection). */
  readonly #names: Map<string, string> | undefined;
  readonly #prefix: string;
  readonly #onPoolError = (error: Error) => {
    this.logger.warn('an idle PostgreSQL connection failed; the pool replaces it', {
      error: this.error(error, 'idle connection'),
    });
  };
  /** Clients that already carry {@link #onClientError}. */
  readonly #guarded = new WeakSet<pg.Client>();
  readonly #onClientError = (error: Error) => {
    this.logger.debug('a PostgreSQL connection failed', { error: error.message });
  };
  readonly #guard = (client: pg.Client) => {
    if (this.#guarded.has(client)) return;
    this.#guarded.add(client);
    client.on('error', this.#onClientError);
  };
  #closed = false;
  /** The executor on the pool. */
  readonly exec: PostgresExecutor;

  constructor(options: {
    pool: pg.Pool;
    ownsPool: boolean;
    target: ConnectionTarget;
    secret: string | undefined;
    logger: Logger;
    clock: Clock;
    preparedStatements: boolean;
  }) {
    this.#clock = options.clock;
    // The schema's hash keeps two backends sharing a pool apart.
    this.#prefix = `duetime_${createHash('sha256').update(options.target.schema).digest('hex').slice(0, 10)}_`;
    this.#names = options.preparedStatements ? new Map() : undefined;
    this.pool = options.pool;
    this.#ownsPool = options.ownsPool;
    this.target = options.target;
    this.#secret = options.secret;
    this.logger = options.logger;
    // Without a listener, an idle client that loses its connection (a restarted server) would crash the
    // process. On the application's pool this only adds a log line; the pool still emits to its own.
    this.pool.on('error', this.#onPoolError);
    // pg-pool hands a client to a waiting caller with no error listener for a moment; a connection
    // terminated in that moment would emit an unheard `error` and crash the process. Every client of the
    // pool gets a permanent listener that logs.
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

  /** The name of `text` as a prepared statement, or undefined when they are off. */
  #name(text: string): string | undefined {
    if (!this.#names) return undefined;
    let name = this.#names.get(text);
    if (!name) {
      name = this.#prefix + createHash('sha256').update(text).digest('hex').slice(0, 16);
      this.#names.set(text, name);
    }
    return name;
  }

  /** An executor on `on` (the pool, or a client), reading results with {@link RAW_TYPES}. */
  executor(on: Queryable, prepared = true): PostgresExecutor {
    return {
      query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => {
        this.check();
        const name = prepared ? this.#name(text) : undefined;
        const config: pg.QueryConfig = { text, values: params as unknown[], types: RAW_TYPES };
        if (name) config.name = name;
        return (await on.query(config)) as pg.QueryResult<R>;
      },
    };
  }

  /** Maps a pg error to a duetime error naming `operation` and the target. */
  error(error: unknown, operation: string): Error {
    return toDuetimeError(error, operation, this.target, this.#secret);
  }

  /** Runs one statement on `exec` (the pool by default), mapping errors. */
  async query<R extends Record<string, unknown>>(
    operation: string,
    text: string,
    params: readonly unknown[] = [],
    exec: PostgresExecutor = this.exec,
  ): Promise<{ rows: R[]; rowCount: number | null }> {
    try {
      return await exec.query<R>(text, params);
    } catch (error) {
      throw this.error(error, operation);
    }
  }

  /**
   * Retries `attempt` a few times (50 ms, then 200 ms of the backend's clock) while the connection was lost
   * and the backend is open; other errors surface at once, mapped to duetime errors.
   */
  #whileConnectionLost<T>(operation: string, attempt: () => Promise<T>): Promise<T> {
    return retry(
      async () => {
        this.check();
        try {
          return await attempt();
        } catch (error) {
          throw this.#closed || !isConnectionLost(error) ? this.error(error, operation) : error;
        }
      },
      {
        clock: this.#clock,
        attempts: 3,
        // Errors already mapped above are final; only a raw lost-connection error is retried.
        retryIf: (error) => !(error instanceof DuetimeError) && !this.#closed && isConnectionLost(error),
        delayMs: backoff({ initialMs: 50, factor: 4 }),
        onGiveUp: (error) => this.error(error, operation),
      },
    );
  }

  /**
   * Runs an idempotent statement on the pool, retrying a few times when the connection was lost (a
   * pooled connection the server had already closed, a short failover). Other errors surface at once.
   */
  idempotent<R extends Record<string, unknown>>(
    operation: string,
    text: string,
    params: readonly unknown[] = [],
  ): Promise<{ rows: R[]; rowCount: number | null }> {
    return this.#whileConnectionLost(operation, () => this.exec.query<R>(text, params));
  }

  /**
   * Checks a client out of the pool for a transaction, with an error listener attached while it is out
   * (pg emits `error` on a checked-out client whose socket dies; unheard, that would crash the process).
   * Retries a few times when no connection can be made.
   */
  checkout(operation: string): Promise<CheckedOutClient> {
    return this.#whileConnectionLost(
      operation,
      async () => new CheckedOutClient(await this.pool.connect(), this.logger),
    );
  }

  /** Runs `fn` on a client inside BEGIN … COMMIT (rolled back when it throws). */
  async transaction<T>(operation: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const out = await this.checkout(operation);
    try {
      await out.client.query('BEGIN');
      const result = await fn(out.client);
      await out.client.query('COMMIT');
      out.release(false);
      return result;
    } catch (error) {
      await out.rollback();
      throw this.error(error, operation);
    }
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

/** A pool client checked out for one transaction. `release` is safe to call more than once. */
export class CheckedOutClient {
  readonly client: pg.PoolClient;
  #broken = false;
  #released = false;
  readonly #onError: (error: Error) => void;

  constructor(client: pg.PoolClient, logger: Logger) {
    this.client = client;
    this.#onError = (error) => {
      this.#broken = true;
      logger.debug('a PostgreSQL connection in use failed', { error: error.message });
    };
    client.on('error', this.#onError);
  }

  /** Rolls back, destroying the connection when that fails (its state is unknown). */
  async rollback(): Promise<void> {
    if (this.#released) return;
    try {
      if (!this.#broken) await this.client.query('ROLLBACK');
      this.release(this.#broken);
    } catch {
      this.release(true);
    }
  }

  release(destroy: boolean): void {
    if (this.#released) return;
    this.#released = true;
    // Keep a listener until the pool has it back: a late socket error must not go unheard.
    if (destroy || this.#broken) {
      this.client.release(true);
    } else {
      this.client.off('error', this.#onError);
      this.client.release();
    }
  }
}
