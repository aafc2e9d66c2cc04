import { BackendError } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend, LATEST_SCHEMA_VERSION } from '../src/index.js';
import { spawnChild } from './fixtures/processes.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;

describe('several processes on one file', () => {
  it('run the migrations at the same time on a new file: each opens it, the schema is created once', async () => {
    const file = files.file('migrate');
    const children = Array.from({ length: 4 }, () => spawnChild('open', file));
    const lines = await Promise.all(children.map((c) => c.line(/^OPENED /)));
    expect(lines).toEqual(children.map(() => `OPENED ${LATEST_SCHEMA_VERSION}`));
    expect(await Promise.all(children.map((c) => c.exited))).toEqual(children.map(() => 0));
    const db = new Database(file, { readonly: true });
    expect(db.prepare('SELECT name, value FROM duetime_meta ORDER BY name').all()).toEqual([
      { name: 'format', value: 'duetime' },
      { name: 'schedule_version', value: 0 },
      { name: 'schema_version', value: LATEST_SCHEMA_VERSION },
    ]);
    db.close();
  }, 60_000);

  it('waits for another process’s write lock without blocking the event loop, then fails transiently naming the file', async () => {
    const file = files.file('locked');
    const backend = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 400 });
    const holder = spawnChild('hold-lock', file);
    try {
      await holder.line(/^LOCKED$/);
      let ticks = 0;
      const timer = setInterval(() => ticks++, 5);
      const error = await backend.store
        .transact((tx) => tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      clearInterval(timer);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as BackendError).transient).toBe(true);
      expect((error as Error).message).toContain(file);
      expect((error as Error).message).toContain('busyTimeoutMs 400');
      expect(ticks).toBeGreaterThan(0);
      // Reads go on meanwhile: WAL readers do not wait for the writer.
      expect(await backend.store.listSchedules()).toEqual([]);
    } finally {
      await holder.kill();
    }
    await backend.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    expect((await backend.store.loadSchedule('k'))?.version).toBe(1);
    await backend.close();
  }, 60_000);

  it('lets a process write while another commits back to back, well within its busy timeout', async () => {
    const file = files.file('fair');
    const backend = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 2000 });
    const hammer = spawnChild('hammer', file, '5000');
    try {
      await hammer.line(/^READY$/);
      for (let i = 0; i < 5; i++)
        await backend.store.transact((tx) =>
          tx.schedule(`mine/${i}`, new Date(Date.now() + HOUR), { type: 't', aggregateId: 'm' }),
        );
      // All five got their turn while the other process was still committing back to back.
      expect(hammer.child.exitCode).toBeNull();
      const hammered = Number((await hammer.line(/^HAMMERED /)).split(' ')[1]);
      expect(hammered).toBeGreaterThan(0);
      expect(await hammer.exited).toBe(0);
      expect((await backend.store.pageSchedules({ prefix: 'mine/', limit: 10 })).items).toHaveLength(5);
      expect((await backend.store.listSchedules()).filter((s) => s.key.startsWith('hammer/'))).toHaveLength(
        hammered,
      );
    } finally {
      await hammer.kill();
    }
    await backend.close();
  }, 60_000);
});
