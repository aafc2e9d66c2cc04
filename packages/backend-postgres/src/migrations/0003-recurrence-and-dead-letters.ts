/**
 * Migration 3: recurring schedules (`schedules.recurrence`, the stored recurrence as JSON, NULL for a
 * one-shot schedule) and dead letters kept in the store (one per key, the last given up on). Existing rows
 * keep their values and become one-shot schedules. `:SCHEMA` is replaced by the quoted schema name.
 */
export default {
  id: 3,
  name: 'recurrence-and-dead-letters',
  sql: `
ALTER TABLE :SCHEMA.schedules ADD COLUMN recurrence json;

CREATE TABLE :SCHEMA.dead_letters (
  key text COLLATE "C" PRIMARY KEY,
  version bigint NOT NULL,
  at timestamptz NOT NULL,
  message json NOT NULL,
  attempts integer NOT NULL,
  error text NOT NULL,
  dead_at timestamptz NOT NULL
);
COMMENT ON TABLE :SCHEMA.dead_letters IS 'duetime: messages the dispatcher gave up on, one per key, until retried or discarded';
`,
};
