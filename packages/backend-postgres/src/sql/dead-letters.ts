import type { DeadLetterListQuery } from '@duetime/core';
import { PREVIEW_JOIN, previewColumns } from './schedules.js';
import { epochMs } from './time.js';

const COLUMNS = `key, version, ${epochMs('at')} AS at, message, attempts, error, ${epochMs('dead_at')} AS "deadAt"`;
/** The columns of a page for display: as {@link COLUMNS}, the data cut by the server (see `PREVIEW_JOIN`). */
const PREVIEW = (n: string) =>
  `key, version, ${epochMs('at')} AS at, ${previewColumns(n)}, attempts, error, ${epochMs('dead_at')} AS "deadAt"`;

/** The statements on `<schema>.dead_letters`, with `$n` parameters; `s` is the quoted schema name. */
export function deadLetterSql(s: string) {
  return {
    /** $1 key */
    delete: `DELETE FROM ${s}.dead_letters WHERE key = $1`,

    /**
     * Keeps dead letters with distinct keys in one statement, each replacing an older one of its key:
     * $1 keys, $2 versions, $3 at, $4 messages, $5 attempts, $6 errors, $7 dead_at.
     */
    put: `INSERT INTO ${s}.dead_letters AS d (key, version, at, message, attempts, error, dead_at)
      SELECT key, version, at, message::json, attempts, error, dead_at
      FROM unnest($1::text[], $2::int8[], $3::timestamptz[], $4::text[], $5::int4[], $6::text[], $7::timestamptz[])
        AS p(key, version, at, message, attempts, error, dead_at)
      ON CONFLICT (key) DO UPDATE SET
        version = EXCLUDED.version,
        at = EXCLUDED.at,
        message = EXCLUDED.message,
        attempts = EXCLUDED.attempts,
        error = EXCLUDED.error,
        dead_at = EXCLUDED.dead_at`,

    /** Key order on the primary key, a literal prefix (an index range), keyset paging after a key. */
    list(q: DeadLetterListQuery): { text: string; params: unknown[] } {
      const params: unknown[] = [];
      const $ = (value: unknown) => `$${params.push(value)}`;
      const preview = q.preview !== undefined;
      const columns = preview ? PREVIEW(`${$(q.preview)}::int`) : COLUMNS;
      const { text } = keys(q, $, preview ? PREVIEW_JOIN : '');
      return { text: `SELECT ${columns} FROM ${text}`, params };
    },

    /**
     * How many dead letters there are under the prefix, up to $limit: a walk of the primary key's index
     * (an index-only scan once the table is vacuumed) that reads no message.
     */
    count(q: { prefix?: string; limit: number }): { text: string; params: unknown[] } {
      const params: unknown[] = [];
      const $ = (value: unknown) => `$${params.push(value)}`;
      const { text } = keys(q, $);
      return { text: `SELECT count(*)::int AS n FROM (SELECT 1 FROM ${text}) AS matching`, params };
    },
  };

  /** The table, its filter, order and limit: what follows `SELECT <columns> FROM`. */
  function keys(q: DeadLetterListQuery, $: (value: unknown) => string, join = ''): { text: string } {
    const where: string[] = [];
    if (q.prefix !== undefined) where.push(`starts_with(key, ${$(q.prefix)})`);
    if (q.after !== undefined) where.push(`key > ${$(q.after)}`);
    const filter = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
    return { text: `${s}.dead_letters ${join} ${filter} ORDER BY dead_letters.key LIMIT ${$(q.limit)}` };
  }
}
