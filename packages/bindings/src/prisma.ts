import { createRequire } from 'node:module';
import type { TransactionRunner } from '@duetime/core';
import { InvalidArgumentError } from '@duetime/core';
import type pg from 'pg';
import type { SqlExecutor } from './executor.js';
import { countOf, deliveryClient, onceFor, pinned, refuse, rowsOf } from './executor.js';

/** The part of a Prisma interactive transaction client a binding uses. */
export interface PrismaTransactionLike {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** Statements whose rows are read: the rest are executed for their count. */
const RETURNS_ROWS = /^\s*(?:select|with|values|show|table)\b|\breturning\b/i;

/**
 * An executor on a Prisma interactive transaction on PostgreSQL: the client that
 * `prisma.$transaction(async (tx) => …)` hands its function (Prisma 5 and later; with Prisma 7's
 * `@prisma/adapter-pg` no engine binary is needed). Pass it to `store.join`. The `PrismaClient` itself is
 * refused: it runs each statement outside any transaction.
 *
 * @example
 * await prisma.$transaction(async (tx) => {
 *   await tx.order.create({ data: { id } });
 *   await store.join(fromPrisma(tx), (dt) => dt.schedule(`order/${id}/expire`, expiry, message));
 * });
 */
export function fromPrisma(tx: PrismaTransactionLike): SqlExecutor {
  const handle = tx as unknown as Record<string, unknown> | null;
  if (typeof handle?.$queryRawUnsafe !== 'function' || typeof handle.$executeRawUnsafe !== 'function')
    refuse(tx, 'a Prisma transaction client (the tx of prisma.$transaction(async (tx) => …))');
  if (typeof handle.$connect === 'function')
    refuse(
      tx,
      'the tx of prisma.$transaction(async (tx) => …), not the PrismaClient (it has no transaction)',
    );
  return {
    async query(text, params = []) {
      if (RETURNS_ROWS.test(text)) {
        const rows = rowsOf(await tx.$queryRawUnsafe(text, ...params));
        return { rows, rowCount: rows.length };
      }
      return { rows: [], rowCount: countOf(await tx.$executeRawUnsafe(text, ...params), 0) };
    },
  };
}

/**
 * The other direction: a Prisma client on the delivery transaction's client (`tx.sql` in a processor on
 * the PostgreSQL backend), with Prisma 7's `@prisma/adapter-pg`. `create` makes the client on the
 * `pg.Pool` it is given, as the application makes it on its own pool; that pool hands out the delivery's
 * client and opens no connection, so the processor's writes commit with the schedule's consumption, or
 * roll back with its part when it throws. One client is made per delivery transaction and `create` (the
 * messages of a batch share it). `$transaction` on it, and any operation Prisma runs in a transaction of
 * its own, is refused with the typed error `tx.sql` gives transaction control (inside Prisma's error).
 *
 * @example
 * import { PrismaPg } from '@prisma/adapter-pg';
 * const onDelivery = (pool: pg.Pool) => new PrismaClient({ adapter: new PrismaPg(pool) });
 * processor: async (tx, message) => {
 *   await toPrisma(tx.sql, onDelivery).order.update({ where: { id: message.aggregateId }, data: { status: 'expired' } });
 * }
 */
export function toPrisma<T>(client: pg.ClientBase, create: (pool: pg.Pool) => T): T {
  deliveryClient(client);
  if (typeof create !== 'function')
    throw new InvalidArgumentError(
      'create',
      create,
      'must be a function (pool) => new PrismaClient({ adapter: new PrismaPg(pool) })',
    );
  return onceFor(client, create, () => {
    // A pg.Pool of the adapter's own pg (it takes nothing else as a pool, and would read anything else as
    // the options of a pool to open), loaded here so that fromPrisma needs neither.
    const { Pool } = createRequire(require.resolve('@prisma/adapter-pg'))('pg') as typeof pg;
    const pool = Object.assign(new Pool({ max: 1 }), {
      connect: async () => pinned(client),
      query: (...args: unknown[]) => (client.query as (...a: unknown[]) => unknown).apply(client, args),
    });
    return create(pool as pg.Pool);
  });
}

const require = createRequire(import.meta.url);

/** Options of Prisma's interactive transactions (`prisma.$transaction(fn, options)`). */
export interface PrismaTransactionOptions {
  /** How long Prisma waits for a connection, in ms (Prisma's default 2,000). */
  maxWait?: number;
  /**
   * How long the transaction may run, in ms (Prisma's default 5,000). A delivery batch aims at the
   * Dispatcher's `batchDuration` (50 ms by default), but keep this above your slowest processor.
   */
  timeout?: number;
}

/** The part of a `PrismaClient` the transaction runner uses. */
export interface PrismaClientLike<Tx> {
  $transaction<R>(fn: (tx: Tx) => Promise<R>, options?: PrismaTransactionOptions): PromiseLike<R>;
}

/**
 * Opens every duetime transaction with Prisma (an interactive `prisma.$transaction(fn)`): pass it as
 * `createPostgresBackend`'s `transactions` option, and processors get Prisma's transaction client as
 * `tx.sql`, their writes committing with the schedule's consumption. No second client per transaction
 * (as `toPrisma` needs): the delivery runs in the transaction Prisma opens.
 *
 * @example
 * const backend = await createPostgresBackend({ connectionString }, { transactions: prismaTransactions(prisma) });
 * new Dispatcher({ store: backend.store, processor: (tx, m) => tx.sql.order.update({ where: { id: m.aggregateId }, data: { status: 'expired' } }) });
 */
export function prismaTransactions<Tx extends PrismaTransactionLike>(
  prisma: PrismaClientLike<Tx>,
  options: PrismaTransactionOptions = {},
): TransactionRunner<Tx> {
  if (typeof (prisma as { $transaction?: unknown } | null)?.$transaction !== 'function')
    refuse(prisma, 'a PrismaClient, which opens interactive transactions', 'prisma');
  return (fn) => Promise.resolve(prisma.$transaction((tx) => fn(fromPrisma(tx), tx), options));
}
