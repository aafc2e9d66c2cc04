import { type CursorBackend, InvalidArgumentError } from '@duetime/core';
import type { Connection } from './connection.js';
import { cursorSql } from './sql/cursors.js';
import { quoteIdent } from './sql/ident.js';
import { PG_MIN_TIME, pgTimestamp } from './sql/time.js';

/**
 * Calendar cursors on PostgreSQL: one row per key, advanced with an upsert that keeps the maximum under
 * the row lock (concurrent advances never move it back), expiring by the server's clock. Arguments arrive
 * checked (core's `guardCursors`); only PostgreSQL's own range is checked here.
 */
export class PostgresCursors implements CursorBackend {
  readonly #connection: Connection;
  readonly #sql: Record<'read' | 'advance', string>;

  constructor(connection: Connection) {
    this.#connection = connection;
    this.#sql = cursorSql(quoteIdent(connection.target.schema));
  }

  async read(key: string): Promise<Date | undefined> {
    const result = await this.#connection.idempotent<{ at_ms: number }>('read cursor', this.#sql.read, [key]);
    const row = result.rows[0];
    return row ? new Date(row.at_ms) : undefined;
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    if (at.getTime() < PG_MIN_TIME)
      throw new InvalidArgumentError('at', at, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
    // Idempotent (a maximum), so a lost reply is safely retried.
    const result = await this.#connection.idempotent<{ at_ms: number }>('advance cursor', this.#sql.advance, [
      key,
      pgTimestamp(at),
      ttlMs,
    ]);
    return new Date(result.rows[0]!.at_ms);
  }
}
