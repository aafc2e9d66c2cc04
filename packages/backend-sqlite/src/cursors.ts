import type { Clock, CursorBackend } from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';
import type { Tables } from './sql/tables.js';
import { prepare } from './statements.js';

/**
 * Calendar cursors in a table: `advance` keeps the maximum of an unexpired cursor in one statement (an
 * expired one is replaced), and refreshes the time to live; `clock` judges expiry.
 */
export class SqliteCursors implements CursorBackend {
  readonly #connection: SqliteConnection;
  readonly #clock: Clock;
  readonly #readSql: string;
  readonly #advanceSql: string;
  #read: Database.Statement | undefined;
  #advance: Database.Statement | undefined;

  constructor(connection: SqliteConnection, tables: Tables, clock: Clock) {
    this.#connection = connection;
    this.#clock = clock;
    const t = tables.cursors;
    this.#readSql = `SELECT at FROM ${t} WHERE key = ? AND expires_at > ?`;
    this.#advanceSql = `INSERT INTO ${t} (key, at, expires_at) VALUES (@key, @at, @expiresAt)
      ON CONFLICT (key) DO UPDATE SET
        at = CASE WHEN expires_at > @now THEN max(at, excluded.at) ELSE excluded.at END,
        expires_at = excluded.expires_at
      RETURNING at`;
  }

  read(key: string): Promise<Date | undefined> {
    return this.#connection.read('read a cursor', (db) => {
      this.#read ??= prepare(db, this.#readSql).pluck();
      const at = this.#read.get(key, this.#clock.now()) as number | undefined;
      return at === undefined ? undefined : new Date(at);
    });
  }

  advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    return this.#connection.write('advance a cursor', (db) => {
      this.#advance ??= prepare(db, this.#advanceSql).pluck();
      const now = this.#clock.now();
      const stored = this.#advance.get({ key, at: at.getTime(), expiresAt: now + ttlMs, now }) as number;
      return new Date(stored);
    });
  }
}
