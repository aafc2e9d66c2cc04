/**
 * Migration 1: schedules with the due index, the store-wide version sequence, and aggregates' events.
 * `:SCHEMA` is replaced by the quoted schema name. Keys use the "C" collation: byte order, so ordering
 * never depends on the server's locale and a literal prefix is an index range.
 */
export default {
  id: 1,
  name: 'schedules-and-events',
  sql: `
CREATE SEQUENCE :SCHEMA.schedule_versions AS bigint;

CREATE TABLE :SCHEMA.schedules (
  key text COLLATE "C" PRIMARY KEY,
  at timestamptz NOT NULL,
  due_at timestamptz NOT NULL,
  version bigint NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  message json NOT NULL,
  last_error text
);
COMMENT ON TABLE :SCHEMA.schedules IS 'duetime: pending one-shot schedules (consumed rows are deleted)';

-- The dispatcher's lookups: due work in (due_at, key) order, and the earliest due_at.
CREATE INDEX schedules_due_idx ON :SCHEMA.schedules (due_at, key);
-- Listing by deadline with keyset paging.
CREATE INDEX schedules_at_idx ON :SCHEMA.schedules (at, key);

CREATE TABLE :SCHEMA.events (
  aggregate_id text COLLATE "C" NOT NULL,
  sequence integer NOT NULL,
  type text NOT NULL,
  data json,
  recorded_at timestamptz NOT NULL,
  PRIMARY KEY (aggregate_id, sequence)
);
COMMENT ON TABLE :SCHEMA.events IS 'duetime: aggregates'' event streams';
`,
};
