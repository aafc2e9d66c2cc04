import type { createPostgresBackend, PGliteLike } from '@duetime/backend-postgres';
import type { SqlExecutor, TransactionRunner } from '@duetime/core';
import type pg from 'pg';

/** Where the group runs a target: the PostgreSQL server, and the schema of the group's tables. */
export interface BindingServer {
  /** The server's URL, with a user name in it. */
  url: string;
  /**
   * The schema of this run: duetime's tables, and the group's own `orders (id text PRIMARY KEY, n
   * integer)` (written through the executor, join direction) and `effects (key text PRIMARY KEY, via
   * text NOT NULL)` (written by `write`, processor direction). Point the library's models at it.
   */
  schema: string;
  /**
   * The PGlite database the group runs on, when given the `pglite` option: open the library on it
   * (`url` then names no server).
   */
  pglite?: PGliteLike;
}

/**
 * A SQL library and its binding, as the binding conformance group runs it. `L` is whatever `open` returns
 * (the library's database object, its pool, its models). Only `name`, `open` and `close` are required; the
 * group registers the cases of each direction the target describes:
 *
 * - **join** (`transaction`; with `rollback`, `failStatement`, `notTransactions` + `bind` for more cases):
 *   `store.join(executor, fn)` inside the library's transaction;
 * - **processor** (`write`; with `nested`, `bindDelivery` for more cases): a processor writing through the
 *   library on the delivery transaction's client (`tx.sql`), including a child process killed inside it
 *   (the group's `module` option names the module exporting the target).
 *
 * Every function may run in a child process too (the kill test opens the target there), so keep them
 * free of state outside what `open` returns.
 */
export interface BindingTarget<L = unknown> {
  /** Shown in test names. */
  name: string;
  /** Opens the library on `server.url`; models the processor writes through point at `server.schema`. */
  open(server: BindingServer): Promise<L>;
  /** Closes what `open` opened (pools, clients). */
  close(library: L): Promise<void>;
  /**
   * Join: runs `fn` in a transaction of the library's own, its handle bound as an executor (`fromX(handle)`),
   * committing when `fn` returns and rolling back when it throws, as the library does.
   */
  transaction?<T>(library: L, fn: (executor: SqlExecutor, handle: unknown) => Promise<T>): Promise<T>;
  /**
   * Join: runs `fn` in a transaction, bound as in `transaction`, then ends it with the library's own
   * explicit rollback call (`trx.rollback()`, `ROLLBACK`), not by throwing.
   */
  rollback?(library: L, fn: (executor: SqlExecutor, handle: unknown) => Promise<void>): Promise<void>;
  /**
   * Join: sends a statement the server refuses through the library's own API on `handle` (the handle
   * `transaction` passed to its function). Default: `SELECT 1/0` through the executor.
   */
  failStatement?(library: L, handle: unknown): Promise<unknown>;
  /** Join: handles of the library that are not an open transaction, each refused by `bind`. */
  notTransactions?(library: L): Promise<unknown[]>;
  /** Join: the binding itself (`fromX`), for the refusals of `notTransactions`. */
  bind?(handle: unknown): SqlExecutor;
  /**
   * Processor: inserts the row `key` into the group's `effects` table (`via` any text) through the
   * library on `sql`, the delivery transaction's client (`tx.sql`).
   */
  write?(library: L, sql: unknown, key: string): Promise<void>;
  /**
   * Processor: the library's own transaction on the delivery's client. `refused`: begins one, expected to
   * fail with an `InvalidArgumentError` naming `tx.sql` (possibly as a `cause`). `savepoint`: writes `key`
   * in a nested transaction whose function then throws `failure`, expected to reject with `failure`, its
   * write undone while the delivery commits.
   */
  nested?:
    | { refused(library: L, sql: unknown): Promise<unknown> }
    | { savepoint(library: L, sql: unknown, key: string, failure: Error): Promise<unknown> };
  /** Processor: the binding (`toX`) on a handle, expected to refuse anything but a client (a pool too). */
  bindDelivery?(library: L, handle: unknown): unknown;
  /**
   * Processor, in the library's own transactions: the runner of the backend's `transactions` option
   * (`postgresJsTransactions(sql)`, `kyselyTransactions(db)`, …). With it, the group's backend (and the
   * kill test's) opens every transaction through the library, and `write` gets the library's own
   * transaction handle as `tx.sql` instead of the delivery's pg client.
   */
  transactions?(library: L): TransactionRunner<unknown>;
}

/** Options of {@link bindingConformance}. */
export interface BindingConformanceOptions {
  /**
   * The module (path or URL) exporting the target, for the kill test: a child process imports it and
   * opens the target there. A `.ts` module needs `tsx` installed. Required when the target has `write`.
   */
  module?: string | URL;
  /** The export of `module` holding the target (default `target`). */
  exportName?: string;
  /** The PostgreSQL server (default `DUETIME_PG_URL`, else `postgres://127.0.0.1:5432/test`). */
  url?: string;
  /**
   * Runs the group on a PGlite database instead of a server: the backend opens on `{ pglite }` and the
   * target gets the database as `server.pglite`. PGlite is one process's database, so the kill test (a
   * child process) is left out; test your crash cases on PGlite's data directory yourself.
   */
  pglite?: () => Promise<PGliteLike>;
}

/** What the cases of the group share: the server, opened before them and closed after them. */
export interface GroupContext {
  target: BindingTarget<unknown>;
  options: BindingConformanceOptions;
  server: {
    url: string;
    schema: string;
    pool: pg.Pool;
    backend: Awaited<ReturnType<typeof createPostgresBackend>>;
    library: unknown;
    pglite?: PGliteLike;
  };
}
