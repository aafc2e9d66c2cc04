import { epochMs } from './time.js';

export interface EventRow extends Record<string, unknown> {
  sequence: number;
  type: string;
  data: string | null;
  ts: number;
}

/** The statements on `<schema>.events`; `s` is the quoted schema name, arguments are SQL expressions. */
export function eventSql(s: string) {
  return {
    load: (aggregateId: string) => `SELECT sequence, type, data, ${epochMs('recorded_at')} AS ts
      FROM ${s}.events WHERE aggregate_id = ${aggregateId} ORDER BY sequence`,

    /**
     * Appends events given as `(aggregate_id, sequence, type, data, recorded_at)` tuples of literals in one
     * statement. The primary key (aggregate_id, sequence) turns a concurrent append into a unique
     * violation: that is the optimistic check.
     */
    append: (rows: string[]) => `INSERT INTO ${s}.events (aggregate_id, sequence, type, data, recorded_at)
      SELECT p.aggregate_id, p.sequence, p.type, p.data::json, p.recorded_at::timestamptz
      FROM (VALUES ${rows.join(', ')}) AS p(aggregate_id, sequence, type, data, recorded_at)`,
  };
}
