import { epochMs } from './time.js';

/** The statements on `<schema>.events`, with `$n` parameters; `s` is the quoted schema name. */
export function eventSql(s: string) {
  return {
    /** $1 aggregate id */
    load: `SELECT sequence, type, data, ${epochMs('recorded_at')} AS timestamp
      FROM ${s}.events WHERE aggregate_id = $1 ORDER BY sequence`,

    /**
     * Appends events to $1's stream after sequence $2: $3 types, $4 data (JSON or NULL), $5 instants.
     * Inserts nothing when the stream's last sequence is not $2; the primary key (aggregate_id, sequence)
     * turns a concurrent append into a unique violation. Either way: an aggregate conflict.
     */
    append: `INSERT INTO ${s}.events (aggregate_id, sequence, type, data, recorded_at)
      SELECT $1, $2::int4 + p.n, p.type, p.data::json, p.recorded_at
      FROM unnest($3::text[], $4::text[], $5::timestamptz[]) WITH ORDINALITY AS p(type, data, recorded_at, n)
      WHERE (SELECT coalesce(max(sequence), 0) FROM ${s}.events WHERE aggregate_id = $1) = $2::int4`,
  };
}
