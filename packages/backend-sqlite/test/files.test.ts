import { readFileSync, writeFileSync } from 'node:fs';
import { BackendError, CorruptDataError, NotSupportedError } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { APPLICATION_ID, createSqliteBackend, LATEST_SCHEMA_VERSION } from '../src/index.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;

function tablesOf(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    return db
      .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
      .pluck()
      .all() as string[];
  } finally {
    db.close();
  }
}

async function openError(target: Parameters<typeof createSqliteBackend>[0], options = {}): Promise<unknown> {
  return createSqliteBackend(target, options).then(
    async (backend) => {
      await backend.close();
      return undefined;
    },
    (error: unknown) => error,
  );
}

/** Some other application's database, with its own tables and (optionally) its own application_id. */
function foreignDatabase(applicationId?: number): string {
  const file = files.file('foreign');
  const db = new Database(file);
  if (applicationId !== undefined) db.pragma(`application_id = ${applicationId}`);
  db.exec(
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers (name) VALUES ('Ada')",
  );
  db.close();
  return file;
}

describe('opening files', () => {
  it('creates a new file in WAL mode, stamped with duetime’s application_id', async () => {
    const file = files.file('new');
    const backend = await createSqliteBackend({ filename: file });
    expect(backend.schemaVersion).toBe(LATEST_SCHEMA_VERSION);
    expect(backend.file).toBe(file);
    await backend.close();
    const db = new Database(file, { readonly: true });
    expect(db.pragma('application_id', { simple: true })).toBe(APPLICATION_ID);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    expect(tablesOf(file)).toEqual([
      'duetime_claims',
      'duetime_cursors',
      'duetime_dead_letters',
      'duetime_events',
      'duetime_leases',
      'duetime_meta',
      'duetime_schedules',
    ]);
  });

  it('migrates idempotently: reopening keeps data and the version counter keeps growing', async () => {
    const file = files.file('reopen');
    const first = await createSqliteBackend({ filename: file });
    await first.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    await first.store.transact((tx) => tx.cancelSchedule('k'));
    await first.close();
    const again = await createSqliteBackend({ filename: file });
    await again.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    expect((await again.store.loadSchedule('k'))?.version).toBe(2);
    await again.close();
  });

  it('migrates a schema-1 file (before recurring schedules and dead letters) keeping its schedules', async () => {
    const file = files.file('schema1');
    const first = await createSqliteBackend({ filename: file });
    await first.store.transact((tx) => tx.schedule('old/1', new Date(Date.now() + HOUR), { type: 't' }));
    await first.close();
    // What version 1 of the schema looked like.
    const db = new Database(file);
    db.exec(
      'DROP TABLE duetime_dead_letters; DROP TABLE duetime_claims; ALTER TABLE duetime_schedules DROP COLUMN recurring; ALTER TABLE duetime_schedules DROP COLUMN recurrence',
    );
    db.prepare("UPDATE duetime_meta SET value = 1 WHERE name = 'schema_version'").run();
    db.close();
    const again = await createSqliteBackend({ filename: file });
    expect(again.schemaVersion).toBe(LATEST_SCHEMA_VERSION);
    expect(await again.store.loadSchedule('old/1')).toMatchObject({ key: 'old/1', version: 1 });
    expect((await again.store.loadSchedule('old/1'))?.recurrence).toBeUndefined();
    expect(await again.store.pageDeadLetters()).toEqual({ items: [] });
    await again.close();
  });

  it('accepts an empty (zero-byte) file as a new database', async () => {
    const file = files.file('empty');
    writeFileSync(file, '');
    const backend = await createSqliteBackend({ filename: file });
    expect(await backend.store.listSchedules()).toEqual([]);
    await backend.close();
  });

  it('refuses a text file with a CorruptDataError naming it, and leaves it untouched', async () => {
    const file = files.file('text');
    const text = 'this is a shopping list, not a database\n'.repeat(20);
    writeFileSync(file, text);
    const error = await openError({ filename: file });
    expect(error).toBeInstanceOf(CorruptDataError);
    expect((error as CorruptDataError).code).toBe('DUETIME_CORRUPT_DATA');
    expect((error as Error).message).toContain(file);
    expect(readFileSync(file, 'utf8')).toBe(text);
  });

  it('refuses a truncated database with a CorruptDataError naming it', async () => {
    const source = files.file('whole');
    const db = new Database(source);
    for (let i = 0; i < 50; i++)
      db.exec(`CREATE TABLE t${i} (x); INSERT INTO t${i} VALUES (randomblob(2000))`);
    db.close();
    const file = files.file('truncated');
    const bytes = readFileSync(source).subarray(0, 6000);
    writeFileSync(file, bytes);
    const error = await openError({ filename: file });
    expect(error).toBeInstanceOf(CorruptDataError);
    expect((error as Error).message).toContain(file);
    expect(readFileSync(file).equals(bytes)).toBe(true);
  });

  it('refuses another application’s database opened by name, and creates nothing in it', async () => {
    for (const applicationId of [undefined, 0x12345678]) {
      const file = foreignDatabase(applicationId);
      const error = await openError({ filename: file });
      expect(error).toBeInstanceOf(CorruptDataError);
      expect((error as Error).message).toContain(file);
      expect((error as Error).message).toContain(applicationId === undefined ? 'customers' : '0x12345678');
      expect(tablesOf(file)).toEqual(['customers']);
    }
  });

  it('refuses an empty database stamped by another application', async () => {
    const file = files.file('stamped');
    const db = new Database(file);
    db.pragma('application_id = 7');
    db.close();
    expect(await openError({ filename: file })).toBeInstanceOf(CorruptDataError);
  });

  it('creates its tables next to the application’s when the application passes its connection', async () => {
    const file = foreignDatabase(0x12345678);
    const db = new Database(file);
    const backend = await createSqliteBackend({ database: db });
    await backend.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    await backend.close();
    expect(db.pragma('application_id', { simple: true })).toBe(0x12345678);
    expect(db.prepare('SELECT name FROM customers').pluck().all()).toEqual(['Ada']);
    db.close();
    // From then on the file holds duetime's meta table, so it opens by name too.
    const byName = await createSqliteBackend({ filename: file });
    expect((await byName.store.loadSchedule('k'))?.key).toBe('k');
    await byName.close();
  });

  it('refuses a half duetime schema and a meta table that is not duetime’s', async () => {
    const partial = files.file('partial');
    let db = new Database(partial);
    db.exec('CREATE TABLE duetime_schedules (key TEXT)');
    db.close();
    const first = await openError({ filename: partial });
    expect(first).toBeInstanceOf(CorruptDataError);
    expect((first as Error).message).toContain('duetime_schedules');

    const strangerMeta = files.file('meta');
    db = new Database(strangerMeta);
    db.exec(
      "CREATE TABLE duetime_meta (name TEXT PRIMARY KEY, value); INSERT INTO duetime_meta VALUES ('owner', 'me')",
    );
    db.close();
    db = new Database(strangerMeta);
    const second = await openError({ database: db });
    db.close();
    expect(second).toBeInstanceOf(CorruptDataError);
    expect((second as Error).message).toContain('duetime_meta');
  });

  it('refuses a database written by a newer schema version, and leaves it untouched', async () => {
    const file = files.file('newer');
    const backend = await createSqliteBackend({ filename: file });
    await backend.close();
    const db = new Database(file);
    db.prepare("UPDATE duetime_meta SET value = ? WHERE name = 'schema_version'").run(
      LATEST_SCHEMA_VERSION + 1,
    );
    db.close();
    const before = readFileSync(file);
    const error = await openError({ filename: file });
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).transient).toBe(false);
    expect((error as Error).message).toMatch(
      new RegExp(`newer duetime \\(schema version ${LATEST_SCHEMA_VERSION + 1}`),
    );
    expect((error as Error).message).toContain(file);
    expect(readFileSync(file).equals(before)).toBe(true);
  });

  it('refuses a UTF-16 database, whose key order would break prefix ranges', async () => {
    const db = new Database(files.file('utf16'));
    db.pragma("encoding = 'UTF-16le'");
    db.exec('CREATE TABLE app (x)');
    expect(await openError({ database: db })).toBeInstanceOf(NotSupportedError);
    db.close();
  });

  it('keeps two table prefixes in one file apart', async () => {
    const file = files.file('prefixes');
    const a = await createSqliteBackend({ filename: file }, { tablePrefix: 'a_' });
    const b = await createSqliteBackend({ filename: file }, { tablePrefix: 'b_' });
    await a.store.transact((tx) =>
      tx.schedule('k', new Date(Date.now() + HOUR), { type: 't', aggregateId: 'a' }),
    );
    expect(await b.store.loadSchedule('k')).toBeUndefined();
    expect(await a.store.loadSchedule('k')).toBeDefined();
    await Promise.all([a.close(), b.close()]);
  });
});
