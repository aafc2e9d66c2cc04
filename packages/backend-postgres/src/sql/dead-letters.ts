import { epochMs } from './time.js';

const COLUMNS = `key, version, ${epochMs('at')} AS at_ms, message, attempts, error, ${epochMs('dead_at')} AS dead_ms`;

export interface DeadLetterRow extends Record<string, unknown> {
  key: string;
  version: number;
  at_ms: number;
  message: string;
  attempts: number;
  error: string;
  dead_ms: number;
}

/**
 * The statements on `<schema>.dead_letters`; `s` is the quoted schema name, arguments are SQL expressions
 * (`$n` placeholders on the pool, inlined literals inside transactions).
 */
export function deadLetterSql(s: string) {
  return {
    load: (key: string) => `SELECT ${COLUMNS} FROM ${s}.dead_letters WHERE key = ${key}`,

    delete: (key: string) => `DELETE FROM ${s}.dead_letters WHERE key = ${key}`,

    /**
     * Keeps dead letters with distinct keys in one statement, each replacing an older one of its key;
     * `rows` are `(key, version, at, message, attempts, error, dead_at)` tuples of literals.
     */
    putMany: (
      rows: string[],
    ) => `INSERT INTO ${s}.dead_letters AS d (key, version, at, message, attempts, error, dead_at)
      SELECT p.key, p.version::int8, p.at::timestamptz, p.message::json, p.attempts::int4, p.error,
        p.dead_at::timestamptz
      FROM (VALUES ${rows.join(', ')}) AS p(key, version, at, message, attempts, error, dead_at)
      ON CONFLICT (key) DO UPDATE SET
        version = EXCLUDED.version,
        at = EXCLUDED.at,
        message = EXCLUDED.message,
        attempts = EXCLUDED.attempts,
        error = EXCLUDED.error,
        dead_at = EXCLUDED.dead_at`,

    /** Key order on the primary key, a literal prefix (an index range), keyset paging after a key. */
    list(query: { prefix: boolean; after: boolean }): string {
      const where: string[] = [];
      let n = 0;
      if (query.prefix) where.push(`starts_with(key, $${++n})`);
      if (query.after) where.push(`key > $${++n}`);
      const filter = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
      return `SELECT ${COLUMNS} FROM ${s}.dead_letters ${filter} ORDER BY key LIMIT $${n + 1}`;
    },
  };
}
