import { epochMs } from './time.js';

/** Columns every schedule read returns, in the shape {@link ScheduleRow} describes. */
const COLUMNS = `key, ${epochMs('at')} AS at_ms, ${epochMs('due_at')} AS due_ms, version, attempts, message`;

export interface ScheduleRow extends Record<string, unknown> {
  key: string;
  at_ms: number;
  due_ms: number;
  version: number;
  attempts: number;
  message: string;
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
     * Creates or replaces schedules with distinct keys in one statement; `rows` are `(key, at, message)`
     * tuples of literals (see {@link scheduleRow}). `attempts` resets and `due_at = at`. Versions come
     * from the store-wide sequence; when a concurrent replacement committed a larger version while this
     * one waited for the row lock, a fresh number is drawn after the lock, so a key's versions grow in
     * commit order.
     */
    putMany: (
      rows: string[],
    ) => `INSERT INTO ${s}.schedules AS t (key, at, due_at, version, attempts, message)
      SELECT p.key, p.at::timestamptz, p.at::timestamptz, nextval('${s}.schedule_versions'), 0, p.message::json
      FROM (VALUES ${rows.join(', ')}) AS p(key, at, message)
      ON CONFLICT (key) DO UPDATE SET
        at = EXCLUDED.at,
        due_at = EXCLUDED.due_at,
        version = CASE WHEN EXCLUDED.version > t.version THEN EXCLUDED.version
                       ELSE nextval('${s}.schedule_versions') END,
        attempts = 0,
        message = EXCLUDED.message,
        last_error = NULL`,

    delete: (key: string) => `DELETE FROM ${s}.schedules WHERE key = ${key}`,

    /** Literal prefix (`starts_with`: no pattern characters); an index range on the "C"-collated key. */
    deletePrefix: (prefix: string) => `DELETE FROM ${s}.schedules WHERE starts_with(key, ${prefix})`,

    /**
     * Locks the row unless another transaction holds it (SKIP LOCKED: concurrent dispatchers never wait
     * for, nor run, the same schedule), checks the version and deletes it inside this transaction; the
     * deletion becomes visible, together with the processor's writes, at commit.
     */
    consume: (key: string, version: string) => `WITH claimed AS (
        SELECT key FROM ${s}.schedules WHERE key = ${key} AND version = ${version} FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${s}.schedules t USING claimed WHERE t.key = claimed.key`,

    /** $1 key, $2 version, $3 attempts, $4 due_at, $5 error text */
    recordFailure: `UPDATE ${s}.schedules SET attempts = $3, due_at = $4::timestamptz, last_error = $5
      WHERE key = $1 AND version = $2`,

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
