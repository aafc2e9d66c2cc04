import { epochMs } from './time.js';

export interface EventRow extends Record<string, unknown> {
  sequence: number;
  type: string;
  data: string | null;
  ts: number;
}

/** The statements on `<schema>.events`; `s` is the quoted schema name. */
export function eventSql(s: string) {
  return {
    /** $1 aggregate id */
    load: `SELECT sequence, type, data, ${epochMs('recorded_at')} AS ts
      FROM ${s}.events WHERE aggregate_id = $1 ORDER BY sequence`,

    /**
     * $1 aggregate id, $2 a JSON array of `{ sequence, type, data?, at }`. One statement for the whole
     * batch; the primary key (aggregate_id, sequence) turns a concurrent append into a unique violation,
     * which is the optimistic check.
     */
    append: `INSERT INTO ${s}.events (aggregate_id, sequence, type, data, recorded_at)
      SELECT $1, (e->>'sequence')::int, e->>'type', e->'data', (e->>'at')::timestamptz
      FROM json_array_elements($2::json) AS e`,
  };
}
