import { Dispatcher, type Processor } from '@duetime/core';
import type BetterSqlite3 from 'better-sqlite3';
import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { Kysely, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { eventually, tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const orders = sqliteTable('orders', { id: text('id').primaryKey(), status: text('status').notNull() });
interface DB {
  orders: { id: string; status: string };
}

/**
 * Processors on SQLite writing through the application's own library: `tx.sql` is the delivery
 * transaction's better-sqlite3 connection, and Drizzle or Kysely put on it write inside that transaction.
 */
async function expireThrough(write: (sql: BetterSqlite3.Database, id: string) => Promise<void>) {
  const backend = await createSqliteBackend({ filename: files.file('processors') });
  await backend.store.transact(async (tx) => {
    tx.sql.exec("CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'pending')");
    for (const id of ['o-0', 'o-1', 'o-2']) {
      tx.sql.prepare('INSERT INTO orders (id) VALUES (?)').run(id);
      await tx.schedule(`order/${id}/expire`, new Date(Date.now() - 1000), {
        type: 'order.expire',
        aggregateId: id,
      });
    }
  });
  const attempts = new Map<string, number>();
  const processor: Processor<BetterSqlite3.Database> = async (tx, message) => {
    const id = message.aggregateId!;
    const attempt = (attempts.get(id) ?? 0) + 1;
    attempts.set(id, attempt);
    await write(tx.sql, id);
    // o-1 fails once after its write: the write is undone with its part, the others commit.
    if (id === 'o-1' && attempt === 1) throw new Error('payment service down');
  };
  const dispatcher = new Dispatcher({ store: backend.store, processor, retryDelay: 50, batchSize: 10 });
  const running = dispatcher.run();
  const statuses = () =>
    backend.store.transact((tx) =>
      tx.sql.prepare('SELECT id, status FROM orders ORDER BY id').all(),
    ) as Promise<{ id: string; status: string }[]>;
  try {
    await eventually('the first batch', () => dispatcher.snapshot().batches >= 1);
    return { backend, dispatcher, running, statuses, attempts };
  } catch (error) {
    await dispatcher.drain();
    await running;
    await backend.close();
    throw error;
  }
}

describe('processors writing through the application’s library on SQLite', () => {
  for (const [library, write] of [
    [
      'Drizzle',
      async (sql: BetterSqlite3.Database, id: string) => {
        drizzle({ client: sql }).update(orders).set({ status: 'expired' }).where(eq(orders.id, id)).run();
      },
    ],
    [
      'Kysely',
      async (sql: BetterSqlite3.Database, id: string) => {
        const db = new Kysely<DB>({ dialect: new SqliteDialect({ database: sql }) });
        await db.updateTable('orders').set({ status: 'expired' }).where('id', '=', id).execute();
      },
    ],
  ] as const) {
    it(`${library}: writes commit with the consumption; a failing processor's write is undone and retried`, async () => {
      const { backend, dispatcher, running, statuses, attempts } = await expireThrough(write);
      try {
        await eventually('every order expired', async () =>
          (await statuses()).every((o) => o.status === 'expired'),
        );
        await eventually(
          'nothing left to deliver',
          async () => (await backend.store.listSchedules()).length === 0,
        );
        expect(attempts.get('o-1')).toBe(2);
        expect(attempts.get('o-0')).toBe(1);
        expect(attempts.get('o-2')).toBe(1);
        expect(dispatcher.snapshot()).toMatchObject({ delivered: 3, failed: 1 });
      } finally {
        await dispatcher.drain();
        await running;
        await backend.close();
      }
    });
  }

  it('a failing processor leaves the others of its batch committed, its own write undone', async () => {
    const seen: string[][] = [];
    const { backend, dispatcher, running, statuses } = await expireThrough(async (sql, id) => {
      drizzle({ client: sql }).update(orders).set({ status: 'expired' }).where(eq(orders.id, id)).run();
      seen.push(
        (await Promise.resolve(
          sql.prepare('SELECT id FROM orders WHERE status = ?').pluck().all('expired'),
        )) as string[],
      );
    });
    try {
      await eventually('every order expired', async () =>
        (await statuses()).every((o) => o.status === 'expired'),
      );
      // Within the first batch, o-2's part saw o-0's write but not o-1's, which its failure undid.
      expect(seen[2]).toEqual(['o-0', 'o-2']);
    } finally {
      await dispatcher.drain();
      await running;
      await backend.close();
    }
  });
});
