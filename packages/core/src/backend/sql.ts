import { InvalidArgumentError } from '../errors.js';

/**
 * Shared by SQL backends: what `tx.sql` must refuse. A statement that begins, ends or prepares a
 * transaction would end duetime's transaction under it (committing an application's row, or a delivery,
 * early), so the `tx.sql` handle of an SQL backend refuses it; savepoints pass, since they nest.
 */

// Sticky: matched where the last one ended, so a statement is read in place (never copied).
const LEADING = /(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*/y;
const CONTROL =
  /(?:begin|start\s+transaction|commit|end|abort|prepare\s+transaction|rollback(?!\s+to\b)(?!\s+(?:work|transaction)\s+to\b))\b/iy;

/**
 * The transaction-control verb `text` starts with (`BEGIN`, `START TRANSACTION`, `COMMIT`, `END`,
 * `ROLLBACK` but not `ROLLBACK TO [SAVEPOINT]`, `ABORT`, `PREPARE TRANSACTION`, also `COMMIT PREPARED` and
 * `ROLLBACK PREPARED`), in upper case, or `undefined` for any other statement. Case, whitespace and
 * leading comments do not matter. `BEGIN` opening a PL/pgSQL block inside `DO $$ … $$` is not at the start
 * of the statement and passes.
 */
export function transactionControl(text: string): string | undefined {
  if (typeof text !== 'string') return undefined;
  LEADING.lastIndex = 0;
  LEADING.exec(text);
  CONTROL.lastIndex = LEADING.lastIndex;
  const match = CONTROL.exec(text);
  return match ? match[0].replace(/\s+/g, ' ').toUpperCase() : undefined;
}

/**
 * Throws the typed error for a transaction-control statement sent through `tx.sql` (see
 * {@link transactionControl}); returns quietly for any other statement.
 * @throws {InvalidArgumentError} naming the field `tx.sql`.
 */
export function refuseTransactionControl(text: string): void {
  const verb = transactionControl(text);
  if (verb === undefined) return;
  throw new InvalidArgumentError(
    'tx.sql',
    text.length > 80 ? `${text.slice(0, 77)}...` : text,
    `${verb} would end duetime's transaction under it; nest with SAVEPOINT name / RELEASE SAVEPOINT name / ROLLBACK TO SAVEPOINT name instead (an ORM's nested transaction does this)`,
  );
}

/** What a statement sent through an {@link SqlExecutor} returns. */
export interface SqlResult {
  /** The rows it returned (none for a statement without `RETURNING`), as column → value objects. */
  rows: Record<string, unknown>[];
  /** How many rows it changed or returned. */
  rowCount: number;
}

/**
 * The executor contract of SQL backends: runs one statement with positional parameters (`$1`, `$2`, … on
 * PostgreSQL) inside the transaction it stands for and returns its rows. Savepoints are plain statements
 * through it. Everything an SQL backend does inside a transaction goes through one, so the transaction
 * can be the application's own: a binding turns a library's transaction (Drizzle, Kysely, Knex, TypeORM,
 * postgres.js, node-postgres) into an executor in a few lines (see `@duetime/bindings`), and
 * `store.join(executor, fn)` runs duetime's writes in it.
 */
export interface SqlExecutor {
  /**
   * Runs `text` with `params` inside the transaction. `name`, when given, names the statement: the same
   * name comes with the same text every time (the PostgreSQL backend names its statements unless its
   * `preparedStatements` option is off), so an executor over a driver that prepares named statements once
   * per connection (node-postgres: `query({ name, text, values })`) may pass it on and save the server
   * the parsing and planning of every call after the first. Any executor may ignore it.
   */
  query(text: string, params: readonly unknown[], name?: string): Promise<SqlResult>;
  /**
   * Optional: whether the handle is inside an open transaction right now, known without a round trip
   * (a driver's transaction status, a library's own flag); `undefined` when it cannot tell. When it
   * answers, `store.join` trusts it instead of probing with a savepoint (`false` is refused with an
   * `InvalidArgumentError` naming `handle`), and a join whose writes are one statement sends that
   * statement alone: one round trip per schedule.
   */
  inTransaction?(): boolean | undefined;
  /**
   * Optional: true when the transaction takes statements sent without waiting for the earlier ones (the
   * driver pipelines or queues them, as postgres.js does, and node-postgres with `pipeline: true`). On a
   * transaction a `TransactionRunner` opened, the Dispatcher's `pipeline` option then runs a batch's
   * processors at once; absent or false, one by one.
   */
  readonly concurrent?: boolean;
}

/**
 * Runs `fn` in a transaction of the application's own SQL library, committing when `fn` returns and
 * rolling back when it throws (as every library's `transaction(fn)` does), and hands it an executor of
 * that transaction (for duetime's statements) and the library's handle (what processors get as
 * `tx.sql`). A backend given one opens every transaction through it (PostgreSQL's `transactions` option);
 * `@duetime/bindings` has one per library.
 *
 * @typeParam H The library's transaction handle (a Drizzle or Kysely transaction, a postgres.js `sql`, …).
 */
export type TransactionRunner<H = unknown> = <T>(
  fn: (executor: SqlExecutor, handle: H) => Promise<T>,
) => Promise<T>;
