import { epochMs } from './time.js';

/**
 * The statements on `<schema>.leases`; `s` is the quoted schema name. Every judgement of time uses the
 * server's `clock_timestamp()`, never the caller's clock. A row is kept after release and expiry: its
 * `token` is the key's fencing counter, and the next holder gets `token + 1`.
 */
export function leaseSql(s: string) {
  const ttl = (param: string) => `clock_timestamp() + ${param}::float8 * interval '1 millisecond'`;
  return {
    /**
     * $1 key, $2 owner, $3 ttl ms. Takes a free or expired key (new token), or renews the caller's own
     * live lease (same token). Returns no row when someone else holds it.
     */
    acquire: `INSERT INTO ${s}.leases AS l (key, owner, token, expires_at)
      VALUES ($1, $2, 1, ${ttl('$3')})
      ON CONFLICT (key) DO UPDATE SET
        token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                     THEN l.token ELSE l.token + 1 END,
        owner = EXCLUDED.owner,
        expires_at = EXCLUDED.expires_at
      WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp() OR l.owner = EXCLUDED.owner
      RETURNING token`,

    /** $1 key, $2 owner, $3 token, $4 ttl ms. Only a live lease is extended: an expired one stays dead. */
    renew: `UPDATE ${s}.leases SET expires_at = ${ttl('$4')}
      WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
      RETURNING token`,

    /** $1 key, $2 owner, $3 token. Frees the key, keeping the row (and its token counter). */
    release: `UPDATE ${s}.leases SET owner = NULL, expires_at = NULL
      WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`,

    /** $1 key */
    holder: `SELECT owner, token,
        ${epochMs('expires_at')} - ${epochMs('clock_timestamp()')} AS remaining_ms
      FROM ${s}.leases WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()`,
  };
}
