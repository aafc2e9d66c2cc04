import type { Knex } from 'knex';
import type { SqlExecutor } from './executor.js';
import { countOf, questionMarks, refuse, rowsOf } from './executor.js';

/**
 * An executor on a Knex transaction (`knex.transaction(async (trx) => …)`, or `await knex.transaction()`)
 * with the `pg` client. Pass it to `store.join`. The `knex` instance itself, and a transaction already
 * committed or rolled back, are refused.
 *
 * @example
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert({ id });
 *   await store.join(fromKnex(trx), (tx) => tx.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromKnex(trx: Knex.Transaction): SqlExecutor {
  const handle = trx as unknown as { isTransaction?: unknown; raw?: unknown; isCompleted?: unknown } | null;
  if (typeof handle?.raw !== 'function')
    refuse(trx, 'a Knex transaction (the trx of knex.transaction(async (trx) => …))');
  if (handle.isTransaction !== true)
    refuse(trx, 'a Knex transaction (knex.transaction(async (trx) => …)), not the knex instance');
  if (typeof handle.isCompleted === 'function' && handle.isCompleted() === true)
    refuse(trx, 'an open Knex transaction; this one was already committed or rolled back');
  return {
    async query(text, params = []) {
      const { text: sql, bindings } = questionMarks(text, params);
      const result = (await trx.raw(sql, bindings as Knex.RawBinding[])) as {
        rows?: unknown;
        rowCount?: unknown;
      };
      const rows = rowsOf(result.rows);
      return { rows, rowCount: countOf(result.rowCount, rows.length) };
    },
  };
}
