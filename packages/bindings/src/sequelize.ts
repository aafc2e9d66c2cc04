import type { TransactionRunner } from '@duetime/core';
import { InvalidArgumentError } from '@duetime/core';
import { QueryTypes, type Sequelize, Transaction } from 'sequelize';
import type { SqlExecutor } from './executor.js';
import { countOf, deliveryClient, overriding, refuse, rowsOf } from './executor.js';

/**
 * An executor on a Sequelize (v6) transaction on PostgreSQL: the `t` that
 * `sequelize.transaction(async (t) => …)` hands its function, or an unmanaged one before its `commit()`.
 * Pass it to `store.join`. Statements run through `sequelize.query` with positional `bind` parameters, so
 * Sequelize's logging and query hooks see them. The `Sequelize` instance and a finished transaction are
 * refused.
 *
 * @example
 * await sequelize.transaction(async (t) => {
 *   await Order.create({ id }, { transaction: t });
 *   await store.join(fromSequelize(t), (tx) => tx.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromSequelize(t: Transaction): SqlExecutor {
  const handle = t as unknown as { sequelize?: { query?: unknown }; finished?: unknown } | null;
  if (!(t instanceof Transaction) || typeof handle?.sequelize?.query !== 'function')
    refuse(t, 'a Sequelize transaction (the t of sequelize.transaction(async (t) => …))');
  if (handle.finished !== undefined)
    refuse(t, `an open Sequelize transaction; this one was already finished (${String(handle.finished)})`);
  const { sequelize } = t as unknown as { sequelize: Sequelize };
  return {
    async query(text, params = []) {
      // RAW answers [rows, the driver's result]; a statement Sequelize takes for an INSERT answers
      // [rows, its count].
      const [rows, meta] = (await sequelize.query(params.length > 0 ? dollarsKept(text) : text, {
        transaction: t,
        type: QueryTypes.RAW,
        ...(params.length > 0 ? { bind: [...params] } : {}),
      })) as [unknown, unknown];
      const count =
        typeof meta === 'object' && meta !== null ? (meta as { rowCount?: unknown }).rowCount : meta;
      return { rows: rowsOf(rows), rowCount: countOf(count, rowsOf(rows).length) };
    },
    // Sequelize marks a transaction `finished` ('commit' or 'rollback') when it ends.
    inTransaction: () => (t as unknown as { finished?: unknown }).finished === undefined,
  };
}

/**
 * `text` with every `$` that is not a parameter doubled where Sequelize would read it: with `bind`, it
 * reads `$$` as `$` and `$name` as a named parameter, so `$$`-quoted text and `$name` reach PostgreSQL
 * unchanged.
 */
function dollarsKept(text: string): string {
  return text.replace(/\B\$(\$|\w+)/g, (match, key: string) =>
    /^[1-9]\d*$/.test(key) ? match : key === '$' ? '$$$$' : `$${match}`,
  );
}

/**
 * The other direction: a Sequelize transaction on the delivery transaction's client (`tx.sql` in a
 * processor on the PostgreSQL backend), to pass as `{ transaction }` to model calls, so a processor's
 * Sequelize writes commit with the schedule's consumption, or roll back with its part when it throws.
 * Nested `sequelize.transaction({ transaction: t }, fn)` runs as a savepoint. Its `commit()`, `rollback()`
 * and `afterCommit()` are refused with an `InvalidArgumentError` naming `transaction` (duetime ends the
 * delivery's transaction, and no Sequelize hook would see it). Its statements run with the type parsers Sequelize gives its own
 * connections (known once `sequelize` has connected: a `DATEONLY` column reads as a string, as it does
 * on them).
 *
 * @example
 * processor: async (tx, message) => {
 *   await Order.update({ status: 'expired' }, { where: { id: message.aggregateId }, transaction: toSequelize(sequelize, tx.sql) });
 * }
 */
export function toSequelize(
  sequelize: Sequelize,
  client: { query: (...args: never[]) => unknown },
): Transaction {
  if (
    typeof (sequelize as { getDialect?: unknown } | null)?.getDialect !== 'function' ||
    sequelize.getDialect() !== 'postgres'
  )
    refuse(sequelize, 'a Sequelize instance with the postgres dialect');
  deliveryClient(client);
  // Sequelize's queries run on the client with the type parsers Sequelize gives its own connections.
  const parsers = sequelize.connectionManager as unknown as {
    getTypeParser(oid: number, format?: string): unknown;
  };
  const types = { getTypeParser: (oid: number, format?: string) => parsers.getTypeParser(oid, format) };
  const query = (text: unknown, ...rest: unknown[]) => {
    const callback = typeof rest.at(-1) === 'function' ? rest.pop() : undefined;
    const run = client.query as (...args: unknown[]) => unknown;
    return typeof text === 'string'
      ? run.call(client, { text, values: rest[0], types }, ...(callback ? [callback] : []))
      : run.call(client, text, ...rest, ...(callback ? [callback] : []));
  };
  return Object.assign(new Transaction(sequelize, {}), {
    connection: overriding(client, { query }),
    commit: async () => refuseEnding('commit'),
    rollback: async () => refuseEnding('rollback'),
    afterCommit: () => refuseEnding('afterCommit'),
  });
}

function refuseEnding(method: string): never {
  throw new InvalidArgumentError(
    'transaction',
    method,
    "is not for a delivery's transaction: duetime commits it with the schedule's consumption, and rolls back the processor's part when it throws",
  );
}

/**
 * Opens every duetime transaction with Sequelize (a managed `sequelize.transaction`): pass it as
 * `createPostgresBackend`'s `transactions` option, and processors get the `Transaction` as `tx.sql` (pass
 * it as `{ transaction: tx.sql }` to models), their writes committing with the schedule's consumption.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: sequelizeTransactions(sequelize) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => Order.update({ status: 'expired' }, { where: { id: m.aggregateId }, transaction: tx.sql }) });
 */
export function sequelizeTransactions(sequelize: Sequelize): TransactionRunner<Transaction> {
  const handle = sequelize as unknown as { transaction?: unknown; query?: unknown } | null;
  if (typeof handle?.transaction !== 'function' || typeof handle.query !== 'function')
    refuse(sequelize, 'a Sequelize instance, which opens transactions', 'sequelize');
  return (fn) => sequelize.transaction((t) => fn(fromSequelize(t), t));
}
