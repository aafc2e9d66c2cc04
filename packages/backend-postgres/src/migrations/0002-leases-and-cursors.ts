/**
 * Migration 2: leases (with their per-key fencing counters) and calendar cursors. `:SCHEMA` is replaced
 * by the quoted schema name.
 */
export default {
  id: 2,
  name: 'leases-and-cursors',
  sql: `
CREATE TABLE :SCHEMA.leases (
  key text COLLATE "C" PRIMARY KEY,
  owner text,
  token bigint NOT NULL,
  expires_at timestamptz,
  CHECK ((owner IS NULL) = (expires_at IS NULL))
);
COMMENT ON TABLE :SCHEMA.leases IS 'duetime: leases; a released or expired row keeps its token counter';

CREATE TABLE :SCHEMA.cursors (
  key text COLLATE "C" PRIMARY KEY,
  at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
COMMENT ON TABLE :SCHEMA.cursors IS 'duetime: calendar cursors (latest occurrence done, per schedule)';
`,
};
