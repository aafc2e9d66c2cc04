import { epochMs } from './time.js';

/** Columns every schedule read returns, in the shape {@link ScheduleRow} describes. */
const COLUMNS = `key, ${epochMs('at')} AS at_ms, ${epochMs('due_at')} AS due_ms, version, attempts, message, last_error, recurrence`;

export interface ScheduleRow extends Record<string, unknown> {
  key: string;
  at_ms: number;
  due_ms: number;
  version: number;
  attempts: number;
  message: string;
  last_error: string | null;
  recurrence: string | null;
}

/**
 * The statements on `<schema>.schedules`. `s` is the quoted schema name; every argument is an SQL
 * expression: a `$n` placeholder for pool queries, an inlined literal inside transactions. Instants go
 * in as timestamptz text (see `pgTimestamp`).
 */
export function scheduleSql(s: string) {
  return {
    load: (key: string) => `SELECT ${COLUMNS} FROM ${s}.schedules WHERE key = ${key}`,

    /**
     * Creates or replaces schedules with distinct keys in one statement; `rows` are
     * `(key, at, message, recurrence)` tuples of literals. `attempts` resets and `due_at = at`. Versions
     * come from the store-wide sequence; when a concurrent replacement committed a larger version while
     * this one waited for the row lock, a fresh number is drawn after the lock, so a key's versions grow
     * in commit order.
     */
    putMany: (
      rows: string[],
    ) => `INSERT INTO ${s}.schedules AS t (key, at, due_at, version, attempts, message, recurrence)
      SELECT p.key, p.at::timestamptz, p.at::timestamptz, nextval('${s}.schedule_versions'), 0, p.message::json,
        p.recurrence::json
      FROM (VALUES ${rows.join(', ')}) AS p(key, at, message, recurrence)
      ON CONFLICT (key) DO UPDATE SET
        at = EXCLUDED.at,
        due_at = EXCLUDED.due_at,
        version = CASE WHEN EXCLUDED.version > t.version THEN EXCLUDED.version
                       ELSE nextval('${s}.schedule_versions') END,
        attempts = 0,
        message = EXCLUDED.message,
        last_error = NULL,
        recurrence = EXCLUDED.recurrence`,

    /**
     * The same as {@link putMany} as one statement with parameters, for a transaction that only schedules:
     * $1 keys, $2 instants (timestamptz text), $3 messages and $4 recurrences (JSON text or NULL), arrays
     * of one length. Prepared once per connection whatever the number of rows.
     */
    putArrays: `INSERT INTO ${s}.schedules AS t (key, at, due_at, version, attempts, message, recurrence)
      SELECT p.key, p.at, p.at, nextval('${s}.schedule_versions'), 0, p.message, p.recurrence
      FROM unnest($1::text[], $2::timestamptz[], $3::json[], $4::json[]) AS p(key, at, message, recurrence)
      ON CONFLICT (key) DO UPDATE SET
        at = EXCLUDED.at,
        due_at = EXCLUDED.due_at,
        version = CASE WHEN EXCLUDED.version > t.version THEN EXCLUDED.version
                       ELSE nextval('${s}.schedule_versions') END,
        attempts = 0,
        message = EXCLUDED.message,
        last_error = NULL,
        recurrence = EXCLUDED.recurrence`,

    /**
     * Puts claimed schedules back at their own versions; `rows` are
     * `(key, at, due_at, version, attempts, message, last_error, recurrence)` tuples of literals. A key
     * that has an active schedule again (a processor of the same batch put it) keeps that newer one.
     */
    restoreMany: (
      rows: string[],
    ) => `INSERT INTO ${s}.schedules (key, at, due_at, version, attempts, message, last_error, recurrence)
      SELECT p.key, p.at::timestamptz, p.due_at::timestamptz, p.version::int8, p.attempts::int4, p.message::json,
        p.last_error, p.recurrence::json
      FROM (VALUES ${rows.join(', ')}) AS p(key, at, due_at, version, attempts, message, last_error, recurrence)
      ON CONFLICT (key) DO NOTHING`,

    /**
     * Arms the next occurrences of recurring schedules: `(key, at, message, recurrence)` tuples, each a
     * new version, inserted only where the key has no active schedule (one written since the claim wins).
     */
    rearmMany: (
      rows: string[],
    ) => `INSERT INTO ${s}.schedules (key, at, due_at, version, attempts, message, recurrence)
      SELECT p.key, p.at::timestamptz, p.at::timestamptz, nextval('${s}.schedule_versions'), 0, p.message::json,
        p.recurrence::json
      FROM (VALUES ${rows.join(', ')}) AS p(key, at, message, recurrence)
      ON CONFLICT (key) DO NOTHING`,

    delete: (key: string) => `DELETE FROM ${s}.schedules WHERE key = ${key}`,

    /** Literal prefix (`starts_with`: no pattern characters); an index range on the "C"-collated key. */
    deletePrefix: (prefix: string) => `DELETE FROM ${s}.schedules WHERE starts_with(key, ${prefix})`,

    /**
     * A delivery's claim, one statement: walks schedules_due_idx (due_at, key) from its start, locks the
     * first `limit` due rows that no other transaction holds (SKIP LOCKED: concurrent deliveries never
     * wait for, nor take, each other's rows), deletes them by primary key and returns them in
     * (due_at, key) order. The deletion becomes visible at the delivery's commit, together with the
     * processors' writes; a rollback (or a crash) leaves them pending.
     */
    claim: (now: string, limit: string) => `WITH claimed AS (
        DELETE FROM ${s}.schedules WHERE key = ANY (ARRAY(
          SELECT key FROM ${s}.schedules WHERE due_at <= ${now}::timestamptz
          ORDER BY due_at, key LIMIT ${limit} FOR UPDATE SKIP LOCKED
        ))
        RETURNING key, at, due_at, version, attempts, message, last_error, recurrence
      )
      SELECT ${COLUMNS} FROM claimed ORDER BY due_at, key`,

    /** $1 now, $2 limit. Walks schedules_due_idx (due_at, key) from its start: O(log n + limit). */
    due: `SELECT ${COLUMNS} FROM ${s}.schedules WHERE due_at <= $1::timestamptz
      ORDER BY due_at, key LIMIT $2`,

    /** The first entry of schedules_due_idx. */
    nextDue: `SELECT ${epochMs('due_at')} AS due_ms FROM ${s}.schedules ORDER BY due_at LIMIT 1`,

    /** Builds the listing query for the filters present; parameters in the order returned. */
    list(query: { through: boolean; prefix: boolean; after: boolean }): string {
      const where: string[] = [];
      let n = 0;
      if (query.through) where.push(`at <= $${++n}::timestamptz`);
      if (query.prefix) where.push(`starts_with(key, $${++n})`);
      if (query.after) {
        where.push(`(at, key) > ($${n + 1}::timestamptz, $${n + 2})`);
        n += 2;
      }
      const filter = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
      return `SELECT ${COLUMNS} FROM ${s}.schedules ${filter} ORDER BY at, key LIMIT $${n + 1}`;
    },
  };
}
