import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { BackendError, type Logger, NotFoundError } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();

const message = { type: 'order.expire', aggregateId: '1' };

describe('migrate: false (open an existing store, change nothing)', () => {
  it('refuses a missing file with a NotFoundError and creates no file', async () => {
    const file = files.file('missing');
    const before = readdirSync(files.dir);
    const error = await createSqliteBackend({ filename: file }, { migrate: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as NotFoundError).code).toBe('DUETIME_NOT_FOUND');
    expect((error as Error).message).toContain(file);
    expect(existsSync(file)).toBe(false);
    expect(readdirSync(files.dir)).toEqual(before);
    await expect(createSqliteBackend({ filename: ':memory:' }, { migrate: false })).rejects.toBeInstanceOf(
      NotFoundError,
    );
  });

  it('refuses a database without duetime tables under the prefix, leaving it byte for byte as it was', async () => {
    const empty = files.file('empty');
    writeFileSync(empty, '');
    await expect(createSqliteBackend({ filename: empty }, { migrate: false })).rejects.toThrow(
      /no duetime tables with the prefix "duetime_"/,
    );
    expect(statSync(empty).size).toBe(0);

    const other = files.file('other-prefix');
    const created = await createSqliteBackend({ filename: other }, { tablePrefix: 'app_' });
    await created.close();
    const size = statSync(other).size;
    const error = await createSqliteBackend({ filename: other }, { migrate: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect(statSync(other).size).toBe(size);
    const inspect = await createSqliteBackend({ filename: other }, { migrate: false, tablePrefix: 'app_' });
    expect(inspect.tablePrefix).toBe('app_');
    await inspect.close();
  });

  it('opens a current store, reads and writes it, and refuses an older schema with advice', async () => {
    const file = files.file('current');
    const writer = await createSqliteBackend({ filename: file });
    await writer.store.transact((tx) => tx.schedule('k/1', new Date('2030-01-01T00:00:00Z'), message));
    await writer.close();
    const reader = await createSqliteBackend({ filename: file }, { migrate: false });
    expect((await reader.store.listSchedules()).map((s) => s.key)).toEqual(['k/1']);
    expect(await reader.store.transact((tx) => tx.cancelSchedule('k/1'))).toBe(true);
    await reader.close();

    const db = new Database(file);
    db.prepare(`UPDATE duetime_meta SET value = 0 WHERE name = 'schema_version'`).run();
    db.close();
    const error = await createSqliteBackend({ filename: file }, { migrate: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as Error).message).toContain('open it once with migrate: true');
  });
});

describe('renamed options', () => {
  it('reads busyTimeout and watchInterval as busyTimeoutMs and watchIntervalMs, warning through the logger', async () => {
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
    const backend = await createSqliteBackend(
      { filename: files.file('renamed') },
      { busyTimeout: 10, watchInterval: 20, logger },
    );
    await backend.close();
    expect(warnings).toEqual([
      expect.stringContaining('options.busyTimeout is deprecated'),
      expect.stringContaining('options.watchInterval is deprecated'),
    ]);
    expect(warnings[0]).toContain('options.busyTimeoutMs');
    await expect(
      createSqliteBackend({ filename: files.file('both') }, { busyTimeout: 10, busyTimeoutMs: 10 }),
    ).rejects.toMatchObject({ field: 'options.busyTimeout' });
  });
});
