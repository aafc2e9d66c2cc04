import { epochMs } from './time.js';

/** The statements on `<schema>.cursors`; `s` is the quoted schema name. Expiry uses the server's clock. */
export function cursorSql(s: string) {
  return {
    /** $1 key */
    read: `SELECT ${epochMs('at')} AS at_ms FROM ${s}.cursors WHERE key = $1 AND expires_at > clock_timestamp()`,

    /**
     * $1 key, $2 at, $3 ttl ms. Keeps the maximum of a live cursor and `at` (an expired one starts over
     * from `at`), refreshes the time to live, and returns the stored instant. The row lock orders
     * concurrent advances, so the maximum always wins.
     */
    advance: `INSERT INTO ${s}.cursors AS c (key, at, expires_at)
      VALUES ($1, $2::timestamptz, clock_timestamp() + $3::float8 * interval '1 millisecond')
      ON CONFLICT (key) DO UPDATE SET
        at = CASE WHEN c.expires_at > clock_timestamp() THEN greatest(c.at, EXCLUDED.at) ELSE EXCLUDED.at END,
        expires_at = EXCLUDED.expires_at
      RETURNING ${epochMs('at')} AS at_ms`,
  };
}
