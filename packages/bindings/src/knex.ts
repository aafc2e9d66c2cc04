import type { TransactionRunner } from '@duetime/core';
import knexFactory, { type Knex } from 'knex';
import type { SqlExecutor } from './executor.js';
import { countOf, deliveryClient, onceFor, questionMarks, refuse, rowsOf } from './executor.js';

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
    inTransaction: () =>
      typeof handle.isCompleted === 'function' ? handle.isCompleted() !== true : undefined,
  };
}

const NO_CONFIG = {};

/** Knex's node-postgres client, with every connection it asks for being the delivery's client. */
let DeliveryClient: (new (config: Knex.Config) => Knex.Client & { delivery: unknown }) | undefined;

function deliveryClientClass(): NonNullable<typeof DeliveryClient> {
  // Knex's `pg` dialect class, from an instance that opens nothing (no connection, so no pool).
  const PgClient = knexFactory({ client: 'pg' }).client.constructor as new (
    config: Knex.Config,
  ) => Knex.Client;
  return class extends PgClient {
    delivery: unknown;
    override acquireConnection() {
      return Promise.resolve(this.delivery);
    }
    override releaseConnection() {
      return Promise.resolve();
    }
  };
}

/**
 * The other direction: a Knex instance on the delivery transaction's client (`tx.sql` in a processor on
 * the PostgreSQL backend), so a processor writes through Knex and its writes commit with the schedule's
 * consumption, or roll back with its part when it throws. Every query runs on that client, and Knex opens
 * no pool. The instance is made once per delivery transaction and `config` object (the messages of a
 * batch share it). `config` takes Knex's other options (`postProcessResponse`, `wrapIdentifier`, …); the
 * search path is the delivery's, so qualify tables with `withSchema`. `knex.transaction()` on it is
 * refused with the typed error `tx.sql` gives transaction control (it would begin a transaction inside
 * duetime's).
 *
 * @example
 * processor: async (tx, message) => {
 *   await toKnex(tx.sql)('orders').where({ id: message.aggregateId }).update({ status: 'expired' });
 * }
 */
export function toKnex(
  client: { query: (...args: never[]) => unknown },
  config: Omit<Knex.Config, 'client' | 'connection' | 'pool' | 'connectionPool' | 'searchPath'> = NO_CONFIG,
): Knex {
  deliveryClient(client);
  return onceFor(client, config, () => {
    DeliveryClient ??= deliveryClientClass();
    const knex = knexFactory({ ...config, client: DeliveryClient as unknown as typeof knexFactory.Client });
    (knex.client as InstanceType<typeof DeliveryClient>).delivery = client;
    return knex;
  });
}

/**
 * Opens every duetime transaction with Knex (`knex.transaction`): pass it as `createPostgresBackend`'s
 * `transactions` option, and processors get the Knex `trx` as `tx.sql`, their writes committing with the
 * schedule's consumption.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: knexTransactions(knex) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql('orders').where({ id: m.aggregateId }).update({ status: 'expired' }) });
 */
export function knexTransactions(knex: Knex): TransactionRunner<Knex.Transaction> {
  const handle = knex as unknown as { transaction?: unknown; isTransaction?: unknown } | null;
  if (typeof handle?.transaction !== 'function' || handle.isTransaction === true)
    refuse(knex, 'a Knex instance (not a transaction), which opens transactions', 'knex');
  return (fn) => knex.transaction((trx) => fn(fromKnex(trx), trx));
}
