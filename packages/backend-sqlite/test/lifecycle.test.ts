import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ClosedError, InvalidArgumentError, ManualClock } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;

describe('options', () => {
  it('rejects a bad target or option with an InvalidArgumentError naming the field and the value', async () => {
    const readonlyFile = files.file('readonly');
    new Database(readonlyFile).close();
    const readonlyDb = new Database(readonlyFile, { readonly: true });
    const closedDb = new Database(':memory:');
    closedDb.close();
    const directory = files.dir;
    const good = { filename: files.file('good') };
    const cases: [string, unknown, unknown, unknown?][] = [
      ['target', null, undefined],
      ['target', {}, undefined],
      ['target', { filename: 'a.db', database: new Database(':memory:') }, undefined],
      ['filename', { filename: '' }, ''],
      ['filename', { filename: 42 }, 42],
      ['filename', { filename: join(directory, 'missing', 'x.db') }, join(directory, 'missing', 'x.db')],
      ['filename', { filename: directory }, directory],
      ['filename', { filename: 'file:x.db?mode=ro' }, 'file:x.db?mode=ro'],
      ['database', { database: { name: 'not a database' } }, undefined],
      ['database', { database: closedDb }, ':memory:'],
      ['database', { database: readonlyDb }, readonlyFile],
      ['options.tablePrefix', good, 'bad-prefix', { tablePrefix: 'bad-prefix' }],
      ['options.tablePrefix', good, '1abc', { tablePrefix: '1abc' }],
      ['options.tablePrefix', good, 'x'.repeat(33), { tablePrefix: 'x'.repeat(33) }],
      ['options.busyTimeoutMs', good, -1, { busyTimeoutMs: -1 }],
      ['options.busyTimeoutMs', good, Number.NaN, { busyTimeoutMs: Number.NaN }],
      ['options.busyTimeoutMs', good, 2 ** 31, { busyTimeoutMs: 2 ** 31 }],
      ['options.watchIntervalMs', good, 0, { watchIntervalMs: 0 }],
      ['options.synchronous', good, 'off', { synchronous: 'off' }],
      ['options.clock', good, undefined, { clock: {} }],
      ['options.logger', good, undefined, { logger: { info() {} } }],
      ['options', good, 'fast', 'fast'],
    ];
    for (const [field, target, value, options] of cases) {
      const error = await createSqliteBackend(target as never, options as never).then(
        async (backend) => {
          await backend.close();
          return undefined;
        },
        (e: unknown) => e,
      );
      expect(error, `expected an InvalidArgumentError for ${field}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      if (value !== undefined) expect((error as InvalidArgumentError).value).toEqual(value);
    }
    readonlyDb.close();
  });
});

describe('close()', () => {
  it('is idempotent, stops the change watcher’s timer, and makes later calls fail with ClosedError', async () => {
    const clock = new ManualClock();
    const backend = await createSqliteBackend({ filename: files.file('close') }, { clock });
    const handlesBefore = process.getActiveResourcesInfo().length;
    const unsubscribe = backend.store.onChange(() => {});
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(500); // the watcher keeps polling while someone listens
    expect(clock.pendingTimers).toBe(1);
    await Promise.all([backend.close(), backend.close()]);
    await backend.close();
    unsubscribe();
    expect(clock.pendingTimers).toBe(0);
    expect(process.getActiveResourcesInfo().length).toBeLessThanOrEqual(handlesBefore);
    await expect(
      backend.store.transact((tx) =>
        tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
      ),
    ).rejects.toBeInstanceOf(ClosedError);
    await expect(backend.leases.acquire('l', 'me', 1000)).rejects.toBeInstanceOf(ClosedError);
    await expect(backend.cursors.read('c')).rejects.toBeInstanceOf(ClosedError);
    await expect(backend.store.listSchedules()).rejects.toBeInstanceOf(ClosedError);
  });

  it('arms no timer while nobody watches', async () => {
    const clock = new ManualClock();
    const backend = await createSqliteBackend({ filename: files.file('idle') }, { clock });
    await backend.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    expect(clock.pendingTimers).toBe(0);
    const unsubscribe = backend.store.onChange(() => {});
    unsubscribe();
    expect(clock.pendingTimers).toBe(0);
    await backend.close();
  });

  it('rolls back a transaction still open, frees the file for others, and fails its commit', async () => {
    const file = files.file('open-tx');
    const closing = await createSqliteBackend({ filename: file });
    const other = await createSqliteBackend({ filename: file }, { busyTimeoutMs: 0 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let inside!: () => void;
    const entered = new Promise<void>((resolve) => {
      inside = resolve;
    });
    const pending = closing.store.transact(async (tx) => {
      await tx.schedule('half/done', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' });
      inside();
      await gate;
    });
    await entered;
    const queued = other.store.transact((tx) =>
      tx.schedule('other/1', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'b' }),
    );
    await closing.close();
    await queued; // the gate and SQLite's lock were freed by close()
    release();
    await expect(pending).rejects.toBeInstanceOf(ClosedError);
    expect(await other.store.loadSchedule('half/done')).toBeUndefined();
    expect(await other.store.loadSchedule('other/1')).toBeDefined();
    await other.close();
  });

  it('closes both of its own connections: the last one out removes the WAL file', async () => {
    const file = files.file('wal');
    const backend = await createSqliteBackend({ filename: file });
    await backend.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    expect((await backend.store.loadSchedule('k'))?.key).toBe('k');
    expect(existsSync(`${file}-wal`)).toBe(true);
    await backend.close();
    expect(existsSync(`${file}-wal`)).toBe(false);
  });
});
