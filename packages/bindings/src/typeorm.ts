import type { TransactionRunner } from '@duetime/core';
import type { DataSource, EntityManager } from 'typeorm';
import type { SqlExecutor } from './executor.js';
import { countOf, deliveryClient, refuse, rowsOf } from './executor.js';

/**
 * An executor on a TypeORM transaction on PostgreSQL: the `EntityManager` that
 * `dataSource.transaction(async (manager) => …)` hands its function, or `queryRunner.manager` after
 * `queryRunner.startTransaction()`. Pass it to `store.join`. A manager outside a transaction is refused.
 *
 * @example
 * await dataSource.transaction(async (manager) => {
 *   await manager.insert(Order, { id });
 *   await store.join(fromTypeORM(manager), (tx) => tx.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromTypeORM(manager: EntityManager): SqlExecutor {
  const runner = (
    manager as unknown as { queryRunner?: { isTransactionActive?: unknown; isReleased?: unknown } } | null
  )?.queryRunner;
  if (!runner)
    refuse(
      manager,
      'the EntityManager of a TypeORM transaction (dataSource.transaction(async (manager) => …))',
    );
  if (runner.isReleased === true || runner.isTransactionActive !== true)
    refuse(manager, 'the EntityManager of an open TypeORM transaction; its query runner has none');
  const queryRunner = manager.queryRunner!;
  return {
    async query(text, params = []) {
      const result = await queryRunner.query(text, [...params], true);
      const rows = rowsOf(result.records);
      return { rows, rowCount: countOf(result.affected, rows.length) };
    },
    inTransaction: () => queryRunner.isTransactionActive && !queryRunner.isReleased,
  };
}

/**
 * The other direction: a TypeORM `EntityManager` on the delivery transaction's client (`tx.sql` in a
 * processor on the PostgreSQL backend), so a processor's repository writes commit with the schedule's
 * consumption, or roll back with its part when it throws. `dataSource` is the application's initialized
 * PostgreSQL `DataSource` (for its entities); the manager's query runner runs on the client, stands inside
 * duetime's transaction, and gives the client back to no pool. `manager.transaction(fn)` on it nests as a
 * savepoint. Only this manager runs on the delivery: `dataSource.manager` and repositories taken from the
 * data source run on its own pool, outside it.
 *
 * @example
 * processor: async (tx, message) => {
 *   await toTypeORM(dataSource, tx.sql).update(Order, { id: message.aggregateId }, { status: 'expired' });
 * }
 */
export function toTypeORM(
  dataSource: DataSource,
  client: { query: (...args: never[]) => unknown },
): EntityManager {
  const options = (dataSource as { options?: { type?: unknown } } | null)?.options;
  if (options?.type !== 'postgres' || typeof dataSource.createQueryRunner !== 'function')
    refuse(dataSource, 'an initialized TypeORM DataSource of type postgres');
  deliveryClient(client);
  const runner = dataSource.createQueryRunner('master');
  // Connected to the client already (connect() hands it out; no release goes to the pool), and inside a
  // transaction: save() opens none of its own, manager.transaction() nests as a savepoint.
  Object.assign(runner, { databaseConnection: client, isTransactionActive: true, transactionDepth: 1 });
  return runner.manager;
}

/**
 * Opens every duetime transaction with TypeORM (`dataSource.transaction`): pass it as
 * `createPostgresBackend`'s `transactions` option, and processors get the transaction's `EntityManager`
 * as `tx.sql`, their writes committing with the schedule's consumption.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: typeormTransactions(dataSource) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql.update(Order, { id: m.aggregateId }, { status: 'expired' }) });
 */
export function typeormTransactions(dataSource: DataSource): TransactionRunner<EntityManager> {
  const handle = dataSource as unknown as { transaction?: unknown; manager?: unknown } | null;
  if (typeof handle?.transaction !== 'function' || handle.manager === undefined)
    refuse(dataSource, 'a TypeORM DataSource, which opens transactions', 'dataSource');
  return (fn) => dataSource.transaction((manager) => fn(fromTypeORM(manager), manager));
}
