import { realpathSync } from 'node:fs';
import { InvalidArgumentError } from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';

/**
 * Checks what `store.join` was handed: a better-sqlite3 connection to the backend's database, open, inside
 * a transaction of the application's own (not one of duetime's on the backend's connection). Refuses
 * anything else with an `InvalidArgumentError` naming `handle`, before anything is written.
 */
export function joinable(handle: unknown, connection: SqliteConnection): Database.Database {
  const db = handle as Database.Database;
  const expected = `a better-sqlite3 connection to ${connection.file} inside a transaction the application began`;
  if (typeof db?.prepare !== 'function' || typeof db.exec !== 'function' || typeof db.pragma !== 'function')
    throw new InvalidArgumentError('handle', describe(handle), `must be ${expected}`);
  if (!db.open) throw new InvalidArgumentError('handle', db.name, `is closed; it must be ${expected}`);
  if (!db.inTransaction || (db === connection.writer && connection.holding))
    throw new InvalidArgumentError(
      'handle',
      db.name,
      `has no open transaction (begin one first: db.exec('BEGIN'), or the library's transaction); it must be ${expected}`,
    );
  if (db !== connection.writer && (fileOf(db) === '' || fileOf(db) !== fileOf(connection.writer)))
    throw new InvalidArgumentError(
      'handle',
      db.name,
      `is a connection to ${fileOf(db) || 'another in-memory database'}; it must be ${expected}`,
    );
  return db;
}

/** A short description of a value for an error message (never the whole object). */
function describe(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== 'Object' ? `a ${name}` : 'an object';
}

/** The real path of a connection's main database file, or '' for an in-memory one. */
function fileOf(db: Database.Database): string {
  const main = (db.pragma('database_list') as { name: string; file: string }[]).find(
    (d) => d.name === 'main',
  );
  if (!main?.file) return '';
  try {
    return realpathSync(main.file);
  } catch {
    return main.file;
  }
}
