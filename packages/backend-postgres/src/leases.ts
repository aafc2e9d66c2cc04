import type { LeaseBackend, LeaseGrant, LeaseHolder } from '@duetime/core';
import type { Connection } from './connection.js';
import { quoteIdent } from './sql/ident.js';
import { leaseSql } from './sql/leases.js';

/**
 * Leases on PostgreSQL, judged by the server's clock (`clock_timestamp()`), never the caller's, so
 * processes with skewed clocks still agree. Each is one statement on a row lock. Fencing tokens are a
 * per-key counter kept in the key's row, which survives release and expiry, so a new holder's token is
 * always greater than every earlier one. Contention is a result (`undefined`/`false`); a failure to ask
 * (connection lost, server down) throws a BackendError and is never reported as contention. Arguments
 * arrive checked (core's `guardLeases`).
 */
export class PostgresLeases implements LeaseBackend {
  readonly #connection: Connection;
  readonly #sql: Record<'acquire' | 'renew' | 'release' | 'holder', string>;

  constructor(connection: Connection) {
    this.#connection = connection;
    this.#sql = leaseSql(quoteIdent(connection.target.schema));
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    // Retrying is safe: the same owner re-acquiring a live lease keeps its token.
    const result = await this.#connection.idempotent<{ token: number }>('acquire lease', this.#sql.acquire, [
      key,
      owner,
      ttlMs,
    ]);
    const row = result.rows[0];
    return row ? { token: row.token } : undefined;
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    const result = await this.#connection.idempotent<{ token: number }>('renew lease', this.#sql.renew, [
      key,
      owner,
      token,
      ttlMs,
    ]);
    const row = result.rows[0];
    return row ? { token: row.token } : undefined;
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    // Not retried: a release whose reply was lost would be reported as "not held" the second time.
    const result = await this.#connection.query('release lease', this.#sql.release, [key, owner, token]);
    return result.rowCount === 1;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    const result = await this.#connection.idempotent<{ owner: string; token: number; remaining_ms: number }>(
      'read lease holder',
      this.#sql.holder,
      [key],
    );
    const row = result.rows[0];
    return row
      ? { owner: row.owner, token: row.token, remainingMs: Math.max(0, row.remaining_ms) }
      : undefined;
  }
}
