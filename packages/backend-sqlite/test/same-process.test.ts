import { symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { aggregate, Dispatcher } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { eventually, tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const counter = aggregate({ type: 'counter', initial: 0, apply: { counted: (n: number) => n + 1 } });
const HOUR = 3_600_000;
const tick = () => new Promise((resolve) => setTimeout(resolve, 1));

/**
 * busyTimeout 0 makes any wait for SQLite's lock fail at once: these tests pass only because instances in
 * one process never reach for the lock while another holds it (they queue on the file's gate instead).
 */
describe('several instances on one file in one process', () => {
  it('serialises concurrent transactions that await inside, with no lock waits and no deadlock', async () => {
    const file = files.file('two');
    const a = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    const b = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    const runs = Array.from({ length: 40 }, (_, i) =>
      (i % 2 === 0 ? a : b).store.transact(async (tx) => {
        await tx.exec(counter, 'c', (_s, ag) => ag.raise('counted', { i }));
        await tick();
        await tx.schedule(`two/${i}`, new Date(Date.now() + HOUR), { type: 't', aggregateId: 'c' });
      }),
    );
    await Promise.all(runs);
    expect((await a.store.loadEvents('c')).map((e) => e.sequence)).toEqual(
      Array.from({ length: 40 }, (_, i) => i + 1),
    );
    expect(await b.store.listSchedules()).toHaveLength(40);
    await Promise.all([a.close(), b.close()]);
  });

  it('shares the gate between { filename }, { database } and a symlinked path to the same file', async () => {
    const file = files.file('shared');
    const link = join(files.dir, 'link-to-shared.db');
    const first = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    symlinkSync(file, link);
    const db = new Database(file);
    const viaDatabase = await createSqliteBackend({ database: db }, { busyTimeoutMs: 0 });
    const viaLink = await createSqliteBackend({ filename: link }, { busyTimeoutMs: 0 });
    const instances = [first, viaDatabase, viaLink];
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        instances[i % 3]!.store.transact(async (tx) => {
          await tx.exec(counter, 'shared', (_s, ag) => ag.raise('counted'));
          await tick();
        }),
      ),
    );
    expect(await first.store.loadEvents('shared')).toHaveLength(30);
    for (const instance of instances) await instance.close();
    db.close();
  });

  it('queues a dispatcher with concurrency 16 and the application’s writes from another instance', async () => {
    const file = files.file('dispatch');
    const worker = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    const app = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    await app.store.transact(async (tx) => {
      for (let i = 0; i < 200; i++)
        await tx.schedule(`d/${i}`, new Date(Date.now() - 1000 + i), {
          type: 't',
          aggregateId: `agg-${i % 10}`,
        });
    });
    const dispatcher = new Dispatcher({
      store: worker.store,
      concurrency: 16,
      rescanInterval: 50,
      processor: async (tx, message) => {
        await tick();
        await tx.exec(counter, message.aggregateId!, (_s, ag) => ag.raise('counted'));
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    const writes = Array.from({ length: 50 }, (_, i) =>
      app.store.transact(async (tx) => {
        await tick();
        await tx.schedule(`later/${i}`, new Date(Date.now() + HOUR), { type: 't', aggregateId: 'later' });
      }),
    );
    await Promise.all(writes);
    await eventually('the 200 due schedules to be delivered', async () => {
      const page = await app.store.pageSchedules({ prefix: 'd/', limit: 1 });
      return page.items.length === 0;
    });
    controller.abort();
    await done;
    let total = 0;
    for (let i = 0; i < 10; i++) total += (await app.store.loadEvents(`agg-${i}`)).length;
    expect(total).toBe(200);
    expect(dispatcher.snapshot()).toMatchObject({ delivered: 200, failed: 0 });
    expect(await app.store.pageSchedules({ prefix: 'later/', limit: 100 })).toMatchObject({
      items: expect.arrayContaining([expect.objectContaining({ key: 'later/49' })]),
    });
    await Promise.all([worker.close(), app.close()]);
  });

  it('reads outside transactions see committed data only (file: at once; in memory: after the commit)', async () => {
    const file = await createSqliteBackend({ filename: files.file('reads') });
    const memory = await createSqliteBackend({ filename: ':memory:' });
    expect(memory.capabilities).toMatchObject({ multiProcess: false, durable: false, sql: true });
    for (const backend of [file, memory]) {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => {
        inside = resolve;
      });
      const writing = backend.store.transact(async (tx) => {
        await tx.schedule('r/1', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'r' });
        inside();
        await gate;
      });
      await entered;
      const read = backend.store.loadSchedule('r/1');
      const early = await Promise.race([read, tick().then(() => 'pending' as const)]);
      if (backend === file) expect(early).toBeUndefined();
      else expect(early).toBe('pending');
      release();
      await writing;
      if (backend === memory) expect((await read)?.key).toBe('r/1');
      expect((await backend.store.loadSchedule('r/1'))?.key).toBe('r/1');
      await backend.close();
    }
  });
});
