import type { CursorBackend, LeaseBackend, LeaseGrant, LeaseHolder } from '@duetime/core';
import { InvalidArgumentError } from '@duetime/core';
import type { Connection } from './connection.js';
import { quoteIdent } from './sql/ident.js';
import { epochMs, PG_MIN_TIME, pgTimestamp } from './sql/time.js';

const ttl = (param: string) => `clock_timestamp() + ${param}::float8 * interval '1 millisecond'`;

/**
 * Leases on PostgreSQL, judged by the server's clock (`clock_timestamp()`), never the caller's, so
 * processes with skewed clocks still agree. Each is one statement on a row lock. A row is kept after
 * release and expiry: its `token` is the key's fencing counter, and the next holder gets `token + 1`.
 * Contention is a result (`undefined`/`false`); a failure to ask throws a BackendError.
 */
export class PostgresLeases implements LeaseBackend {
  readonly #connection: Connection;
  readonly #sql;

  constructor(connection: Connection) {
    this.#connection = connection;
    const s = quoteIdent(connection.target.schema);
    this.#sql = {
      /** $1 key, $2 owner, $3 ttl ms: a free or expired key (new token), or the caller's own (same token). */
      acquire: `INSERT INTO ${s}.leases AS l (key, owner, token, expires_at)
        VALUES ($1, $2, 1, ${ttl('$3')})
        ON CONFLICT (key) DO UPDATE SET
          token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                       THEN l.token ELSE l.token + 1 END,
          owner = EXCLUDED.owner,
          expires_at = EXCLUDED.expires_at
        WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp() OR l.owner = EXCLUDED.owner
        RETURNING token`,
      /** $1 key, $2 owner, $3 token, $4 ttl ms. Only a live lease is extended. */
      renew: `UPDATE ${s}.leases SET expires_at = ${ttl('$4')}
        WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp() RETURNING token`,
      /** $1 key, $2 owner, $3 token. Frees the key, keeping the row (and its token counter). */
      release: `UPDATE ${s}.leases SET owner = NULL, expires_at = NULL
        WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`,
      holder: `SELECT owner, token, ${epochMs('expires_at')} - ${epochMs('clock_timestamp()')} AS remaining_ms
        FROM ${s}.leases WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()`,
    };
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    // Retrying is safe: the same owner re-acquiring a live lease keeps its token.
    const { rows } = await this.#connection.idempotent<{ token: number }>(
      'acquire lease',
      this.#sql.acquire,
      [key, owner, ttlMs],
    );
    return rows[0] ? { token: rows[0].token } : undefined;
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    const { rows } = await this.#connection.idempotent<{ token: number }>('renew lease', this.#sql.renew, [
      key,
      owner,
      token,
      ttlMs,
    ]);
    return rows[0] ? { token: rows[0].token } : undefined;
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    // Not retried: a release whose reply was lost would be reported as "not held" the second time.
    const result = await this.#connection.query('release lease', this.#sql.release, [key, owner, token]);
    return result.rowCount === 1;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    const { rows } = await this.#connection.idempotent<{
      owner: string;
      token: number;
      remaining_ms: number;
    }>('read lease holder', this.#sql.holder, [key]);
    const row = rows[0];
    return row
      ? { owner: row.owner, token: row.token, remainingMs: Math.max(0, row.remaining_ms) }
      : undefined;
  }
}

/**
 * Calendar cursors on PostgreSQL: one row per key, advanced with an upsert that keeps the maximum under
 * the row lock (concurrent advances never move it back), expiring by the server's clock.
 */
export class PostgresCursors implements CursorBackend {
  readonly #connection: Connection;
  readonly #sql;

  constructor(connection: Connection) {
    this.#connection = connection;
    const s = quoteIdent(connection.target.schema);
    this.#sql = {
      read: `SELECT ${epochMs('at')} AS at_ms FROM ${s}.cursors WHERE key = $1 AND expires_at > clock_timestamp()`,
      /** $1 key, $2 at, $3 ttl ms: the maximum of a live cursor and `at` (an expired one starts over). */
      advance: `INSERT INTO ${s}.cursors AS c (key, at, expires_at) VALUES ($1, $2::timestamptz, ${ttl('$3')})
        ON CONFLICT (key) DO UPDATE SET
          at = CASE WHEN c.expires_at > clock_timestamp() THEN greatest(c.at, EXCLUDED.at) ELSE EXCLUDED.at END,
          expires_at = EXCLUDED.expires_at
        RETURNING ${epochMs('at')} AS at_ms`,
    };
  }

  async read(key: string): Promise<Date | undefined> {
    const { rows } = await this.#connection.idempotent<{ at_ms: number }>('read cursor', this.#sql.read, [
      key,
    ]);
    return rows[0] ? new Date(rows[0].at_ms) : undefined;
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    if (at.getTime() < PG_MIN_TIME)
      throw new InvalidArgumentError('at', at, 'is earlier than PostgreSQL can store (4714-11-24 BC)');
    // Idempotent (a maximum), so a lost reply is safely retried.
    const { rows } = await this.#connection.idempotent<{ at_ms: number }>(
      'advance cursor',
      this.#sql.advance,
      [key, pgTimestamp(at), ttlMs],
    );
    return new Date(rows[0]!.at_ms);
  }
}
