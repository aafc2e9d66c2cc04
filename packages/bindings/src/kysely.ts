import type { TransactionRunner } from '@duetime/core';
import { CompiledQuery, Kysely, PostgresDialect, type PostgresPool, type Transaction } from 'kysely';
import type { SqlExecutor } from './executor.js';
import { countOf, deliveryClient, pinned, refuse, rowsOf } from './executor.js';

/**
 * An executor on a Kysely transaction (`db.transaction().execute(async (trx) => …)`, or a controlled
 * transaction from `db.startTransaction().execute()`) on PostgreSQL. Pass it to `store.join`. A `Kysely`
 * that is not a transaction is refused.
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id }).execute();
 *   await store.join(fromKysely(trx), (tx) => tx.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
// biome-ignore lint/suspicious/noExplicitAny: any database interface
export function fromKysely(trx: Transaction<any>): SqlExecutor {
  const handle = trx as unknown as { isTransaction?: unknown; executeQuery?: unknown } | null;
  if (typeof handle?.executeQuery !== 'function')
    refuse(trx, 'a Kysely transaction (the trx of db.transaction().execute(async (trx) => …))');
  if (handle.isTransaction !== true)
    refuse(trx, 'a Kysely transaction (db.transaction().execute(async (trx) => …)), not the Kysely instance');
  return {
    async query(text, params = []) {
      const result = await trx.executeQuery(CompiledQuery.raw(text, [...params]));
      const rows = rowsOf(result.rows);
      return { rows, rowCount: countOf(result.numAffectedRows, rows.length) };
    },
  };
}

/**
 * The other direction: a Kysely instance on the delivery transaction's client (`tx.sql` in a processor on
 * the PostgreSQL backend), so a processor writes through Kysely and its writes commit with the schedule's
 * consumption, or roll back with its part when it throws. `transaction()` on it is refused (it would begin
 * a transaction inside duetime's).
 *
 * @example
 * processor: async (tx, message) => {
 *   await toKysely<DB>(tx.sql).updateTable('orders').set({ status: 'expired' }).where('id', '=', message.aggregateId!).execute();
 * }
 */
export function toKysely<DB>(client: { query: (...args: never[]) => unknown }): Kysely<DB> {
  deliveryClient(client);
  const pool: PostgresPool = {
    options: {},
    connect: async () => pinned(client) as never,
    end: async () => {},
  };
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
}

/**
 * Opens every duetime transaction with Kysely (`db.transaction().execute`): pass it as
 * `createPostgresBackend`'s `transactions` option, and processors get the Kysely `Transaction` as
 * `tx.sql`, their writes committing with the schedule's consumption.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: kyselyTransactions(db) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql.updateTable('orders').set({ status: 'expired' }).where('id', '=', m.aggregateId!).execute() });
 */
export function kyselyTransactions<DB>(db: Kysely<DB>): TransactionRunner<Transaction<DB>> {
  if (typeof (db as { transaction?: unknown } | null)?.transaction !== 'function' || db?.isTransaction)
    refuse(db, 'a Kysely instance (not a transaction), which opens transactions', 'db');
  return (fn) => db.transaction().execute((trx) => fn(fromKysely(trx), trx));
}
