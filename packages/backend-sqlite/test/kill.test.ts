import { Dispatcher, silentLogger } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { EXPIRE_THROUGH, type ExpiryLibrary } from './fixtures/expire.js';
import { spawnChild } from './fixtures/processes.js';
import { eventually, tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const ORDERS = ['o-0', 'o-1', 'o-2'];

/**
 * A process killed (SIGKILL) inside a processor, after its write through the application's library and
 * before its delivery committed: nothing of that delivery stays, and every order is expired exactly once
 * by the deliveries that follow.
 */
describe('SIGKILL inside a processor writing through the application’s library on SQLite', () => {
  for (const library of Object.keys(EXPIRE_THROUGH) as ExpiryLibrary[]) {
    it(`${library}: the killed delivery left nothing; each order is expired once, delivered again`, async () => {
      const file = files.file(`kill-${library}`);
      const setup = await createSqliteBackend({ filename: file });
      await setup.store.transact(async (tx) => {
        tx.sql.exec('CREATE TABLE orders (id TEXT PRIMARY KEY, expirations INTEGER NOT NULL DEFAULT 0)');
        for (const id of ORDERS) {
          tx.sql.prepare('INSERT INTO orders (id) VALUES (?)').run(id);
          await tx.schedule(`order/${id}/expire`, new Date(Date.now() - 1000), {
            type: 'order.expire',
            aggregateId: id,
          });
        }
      });
      await setup.close();

      const child = spawnChild('expire-and-hang', file, library);
      const wrote = await child.line(/^WROTE /);
      await child.kill();
      const killedOrder = wrote.slice('WROTE '.length);
      expect(ORDERS).toContain(killedOrder);

      const backend = await createSqliteBackend({ filename: file }, { claimTimeoutMs: 500 });
      const expirations = () =>
        backend.store.transact((tx) =>
          Object.fromEntries(
            (
              tx.sql.prepare('SELECT id, expirations FROM orders ORDER BY id').all() as {
                id: string;
                expirations: number;
              }[]
            ).map((r) => [r.id, r.expirations]),
          ),
        );
      try {
        // The killed delivery's write did not commit.
        expect(await expirations()).toEqual({ 'o-0': 0, 'o-1': 0, 'o-2': 0 });
        const write = EXPIRE_THROUGH[library];
        const dispatcher = new Dispatcher({
          store: backend.store,
          retryDelay: 10,
          logger: silentLogger,
          processor: (tx, message) => write(tx.sql, message.aggregateId!),
        });
        const running = dispatcher.run();
        try {
          await eventually(
            'every schedule consumed',
            async () => (await backend.store.listSchedules()).length === 0,
          );
        } finally {
          await dispatcher.drain();
          await running;
        }
        expect(await expirations()).toEqual({ 'o-0': 1, 'o-1': 1, 'o-2': 1 });
        // The killed attempt counted: the order it hung on was delivered again, as a second attempt.
        expect(dispatcher.snapshot()).toMatchObject({ delivered: 3 });
        expect(dispatcher.snapshot().failed).toBeGreaterThanOrEqual(1);
      } finally {
        await backend.close();
      }
    });
  }
});
