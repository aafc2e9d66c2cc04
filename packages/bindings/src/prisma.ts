import type { SqlExecutor } from './executor.js';
import { countOf, refuse, rowsOf } from './executor.js';

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
