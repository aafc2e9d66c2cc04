import type { EntityManager } from 'typeorm';
import type { SqlExecutor } from './executor.js';
import { countOf, refuse, rowsOf } from './executor.js';

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
  };
}
