import type { Clock, LeaseBackend, LeaseGrant, LeaseHolder } from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';
import type { Tables } from './sql/tables.js';
import { prepare } from './statements.js';

type LeaseQuery = 'get' | 'upsert' | 'extend' | 'free';

interface LeaseRow {
  owner: string | null;
  token: number;
  expires_at: number;
}

/**
 * Leases in a table, judged by `clock` (the host's clock by default: processes sharing a SQLite file share
 * a host). A released or expired lease keeps its row with `owner` NULL, so the per-key token counter
 * survives and a new holder always gets a larger token. Every change runs in a short `BEGIN IMMEDIATE`
 * transaction, so contenders from any process take turns.
 */
export class SqliteLeases implements LeaseBackend {
  readonly #connection: SqliteConnection;
  readonly #clock: Clock;
  readonly #sql: Record<LeaseQuery, string>;
  readonly #writeStatements = new Map<LeaseQuery, Database.Statement>();
  #readStatement: Database.Statement | undefined;

  constructor(connection: SqliteConnection, tables: Tables, clock: Clock) {
    this.#connection = connection;
    this.#clock = clock;
    const t = tables.leases;
    this.#sql = {
      get: `SELECT owner, token, expires_at FROM ${t} WHERE key = ?`,
      upsert: `INSERT INTO ${t} (key, owner, token, expires_at) VALUES (@key, @owner, @token, @expiresAt)
        ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at`,
      extend: `UPDATE ${t} SET expires_at = ? WHERE key = ?`,
      free: `UPDATE ${t} SET owner = NULL, expires_at = 0 WHERE key = ?`,
    };
  }

  #statement(db: Database.Database, name: LeaseQuery): Database.Statement {
    let statement = this.#writeStatements.get(name);
    if (!statement) {
      statement = prepare(db, this.#sql[name]);
      this.#writeStatements.set(name, statement);
    }
    return statement;
  }

  /** The lease on `key` if it is held and unexpired at `now`. */
  #live(db: Database.Database, key: string, now: number): (LeaseRow & { owner: string }) | undefined {
    const row = this.#statement(db, 'get').get(key) as LeaseRow | undefined;
    return row && row.owner !== null && row.expires_at > now
      ? (row as LeaseRow & { owner: string })
      : undefined;
  }

  acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.#connection.write('acquire a lease', (db) => {
      const now = this.#clock.now();
      const live = this.#live(db, key, now);
      if (live && live.owner !== owner) return undefined;
      if (live) {
        this.#statement(db, 'extend').run(now + ttlMs, key);
        return { token: live.token };
      }
      const previous = this.#statement(db, 'get').get(key) as LeaseRow | undefined;
      const token = (previous?.token ?? 0) + 1;
      this.#statement(db, 'upsert').run({ key, owner, token, expiresAt: now + ttlMs });
      return { token };
    });
  }

  renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.#connection.write('renew a lease', (db) => {
      const now = this.#clock.now();
      const live = this.#live(db, key, now);
      if (!live || live.owner !== owner || live.token !== token) return undefined;
      this.#statement(db, 'extend').run(now + ttlMs, key);
      return { token };
    });
  }

  release(key: string, owner: string, token: number): Promise<boolean> {
    return this.#connection.write('release a lease', (db) => {
      const live = this.#live(db, key, this.#clock.now());
      if (!live || live.owner !== owner || live.token !== token) return false;
      this.#statement(db, 'free').run(key);
      return true;
    });
  }

  holder(key: string): Promise<LeaseHolder | undefined> {
    return this.#connection.read('read a lease', (db) => {
      this.#readStatement ??= prepare(db, this.#sql.get);
      const row = this.#readStatement.get(key) as LeaseRow | undefined;
      const now = this.#clock.now();
      return row && row.owner !== null && row.expires_at > now
        ? { owner: row.owner, token: row.token, remainingMs: row.expires_at - now }
        : undefined;
    });
  }
}
