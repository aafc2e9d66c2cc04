import { aggregate, Dispatcher } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { eventually, tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;
const expire = (id: string) => ({ type: 'order.expire', aggregateId: id });

describe('tx.sql: the application’s tables in duetime’s transactions', () => {
  it('commits the application’s rows with the schedule, and rolls both back on a throw', async () => {
    const db = new Database(files.file('app'));
    db.pragma('journal_mode = WAL');
    db.exec('CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)');
    const backend = await createSqliteBackend({ database: db });
    const status = db.prepare('SELECT status FROM orders WHERE id = ?').pluck();

    await backend.store.transact(async (tx) => {
      tx.sql.prepare('INSERT INTO orders (id, status) VALUES (?, ?)').run('o1', 'pending');
      await tx.schedule('order/o1/expire', new Date(Date.now() + HOUR), expire('o1'));
    });
    expect(status.get('o1')).toBe('pending');
    expect((await backend.store.loadSchedule('order/o1/expire'))?.message).toEqual(expire('o1'));

    const boom = new Error('boom');
    await expect(
      backend.store.transact(async (tx) => {
        tx.sql.prepare('INSERT INTO orders (id, status) VALUES (?, ?)').run('o2', 'pending');
        await tx.schedule('order/o2/expire', new Date(Date.now() + HOUR), expire('o2'));
        await tx.cancelSchedule('order/o1/expire');
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(status.get('o2')).toBeUndefined();
    expect(await backend.store.loadSchedule('order/o2/expire')).toBeUndefined();
    expect(await backend.store.loadSchedule('order/o1/expire')).toBeDefined();

    // The application's own constraint violation also takes the schedule down with it.
    await expect(
      backend.store.transact(async (tx) => {
        await tx.schedule('order/o3/expire', new Date(Date.now() + HOUR), expire('o3'));
        tx.sql.prepare('INSERT INTO orders (id, status) VALUES (?, ?)').run('o1', 'duplicate');
      }),
    ).rejects.toMatchObject({ code: 'SQLITE_CONSTRAINT_PRIMARYKEY' });
    expect(await backend.store.loadSchedule('order/o3/expire')).toBeUndefined();

    await backend.close();
    expect(db.open).toBe(true);
    expect(status.get('o1')).toBe('pending');
    db.close();
  });

  it('works on an application connection that returns BigInts by default, with its busy timeout intact', async () => {
    const db = new Database(files.file('bigint'), { timeout: 1234 });
    db.defaultSafeIntegers(true);
    const backend = await createSqliteBackend({ database: db });
    const at = new Date(Date.now() + HOUR);
    await backend.store.transact((tx) => tx.schedule('big/1', at, expire('b')));
    const schedule = await backend.store.loadSchedule('big/1');
    expect(schedule).toMatchObject({ version: 1, attempts: 0 });
    expect(schedule?.at.getTime()).toBe(at.getTime());
    expect(await backend.leases.acquire('l', 'me', 1000)).toEqual({ token: 1 });
    expect(db.pragma('busy_timeout', { simple: true })).toBe(1234n);
    await backend.close();
    db.close();
  });

  it('runs nested better-sqlite3 transactions as savepoints inside duetime’s transaction', async () => {
    const backend = await createSqliteBackend({ filename: files.file('nested') });
    await backend.store.transact((tx) => {
      tx.sql.exec('CREATE TABLE notes (text TEXT)');
    });
    await expect(
      backend.store.transact(async (tx) => {
        const insert = tx.sql.prepare('INSERT INTO notes (text) VALUES (?)');
        tx.sql.transaction(() => insert.run('inner'))();
        await tx.schedule('n/1', new Date(Date.now() + HOUR), expire('n'));
        throw new Error('outer fails');
      }),
    ).rejects.toThrow('outer fails');
    await backend.store.transact(async (tx) => {
      const count = tx.sql.prepare('SELECT count(*) FROM notes').pluck().get();
      expect(count).toBe(0);
    });
    expect(await backend.store.loadSchedule('n/1')).toBeUndefined();
    await backend.close();
  });

  it('commits a processor’s writes to application tables with the consumption of the schedule', async () => {
    const backend = await createSqliteBackend({ filename: files.file('processor') });
    await backend.store.transact(async (tx) => {
      tx.sql.exec('CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)');
      for (const id of ['a', 'b']) {
        tx.sql.prepare("INSERT INTO orders (id, status) VALUES (?, 'pending')").run(id);
        await tx.schedule(`order/${id}/expire`, new Date(Date.now() - 1), expire(id));
      }
    });
    let failures = 0;
    const dispatcher = new Dispatcher({
      store: backend.store,
      retryDelay: 10,
      processor: (tx, message) => {
        tx.sql.prepare("UPDATE orders SET status = 'expired' WHERE id = ?").run(message.aggregateId);
        if (message.aggregateId === 'b' && failures++ === 0) throw new Error('first attempt fails');
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    await eventually(
      'both schedules consumed',
      async () => (await backend.store.listSchedules()).length === 0,
    );
    controller.abort();
    await done;
    const rows = await backend.store.transact((tx) =>
      tx.sql.prepare('SELECT id, status FROM orders ORDER BY id').all(),
    );
    expect(rows).toEqual([
      { id: 'a', status: 'expired' },
      { id: 'b', status: 'expired' },
    ]);
    expect(failures).toBe(2);
    await backend.close();
  });

  it('refuses transaction control through tx.sql before it runs, and recovers for the next one', async () => {
    const backend = await createSqliteBackend({ filename: files.file('ended') });
    await expect(
      backend.store.transact(async (tx) => {
        tx.sql.exec('COMMIT');
        await tx.schedule('ended/1', new Date(Date.now() + HOUR), expire('e'));
      }),
    ).rejects.toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', message: expect.stringContaining('tx.sql') });
    expect(await backend.store.loadSchedule('ended/1')).toBeUndefined();
    await backend.store.transact((tx) => tx.schedule('ended/2', new Date(Date.now() + HOUR), expire('e')));
    expect(await backend.store.loadSchedule('ended/2')).toBeDefined();
    await backend.close();
  });

  it('maps a broken event sequence to an aggregate conflict, which the store retries', async () => {
    const counter = aggregate({ type: 'counter', initial: 0, apply: { counted: (n: number) => n + 1 } });
    const backend = await createSqliteBackend({ filename: files.file('conflict') });
    let runs = 0;
    await backend.store.transact(async (tx) => {
      runs++;
      await tx.exec(counter, 'c', (_s, ag) => ag.raise('counted'));
      // Only on the first run: someone else's event lands under the same sequence, inside this transaction.
      if (runs === 1)
        tx.sql
          .prepare(
            'INSERT INTO duetime_events (aggregate_id, sequence, type, data, timestamp) VALUES (?, ?, ?, ?, ?)',
          )
          .run('c', 2, 'counted', null, 0);
      await tx.exec(counter, 'c', (_s, ag) => ag.raise('counted'));
    });
    expect(runs).toBe(2);
    expect((await backend.store.loadEvents('c')).map((e) => e.sequence)).toEqual([1, 2]);
    await backend.close();
  });
});
