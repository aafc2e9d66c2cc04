import { BackendError, NotFoundError, NotSupportedError } from '@duetime/core';
import type { Connection } from './connection.js';
import { describeTarget } from './errors.js';
import { migrations, SCHEMA_VERSION } from './migrations/index.js';
import { channelFor } from './notifications.js';
import { quoteIdent, quoteLiteral } from './sql/ident.js';

/** What a migration run found and left. */
export interface MigrationResult {
  /** The schema version before (0: the schema or its tables did not exist). */
  from: number;
  /** The schema version after: always {@link SCHEMA_VERSION}. */
  to: number;
}

/**
 * Brings the schema to {@link SCHEMA_VERSION}. Safe when several processes start at once: they serialise
 * on an advisory lock named after the schema, and each re-reads the version under the lock, so every
 * migration runs exactly once. All pending migrations commit together, or none does. A schema already
 * current costs two reads and takes no lock; one migrated by a newer release is refused.
 */
export async function runMigrations(connection: Connection): Promise<MigrationResult> {
  const found = await readSchemaVersion(connection);
  refuseNewer(connection, found);
  if (found === SCHEMA_VERSION) return { from: found, to: found };
  const { schema } = connection.target;
  const s = quoteIdent(schema);
  const out = await connection.checkout('migrate');
  const client = out.client;
  try {
    await client.query(`BEGIN; SET LOCAL lock_timeout = '60s'`);
    await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
      `duetime:migrate:${schema}`,
    ]);
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    // Only create a missing schema: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when
    // the schema is there, which an application role usually lacks.
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${s}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${s}.migrations (
      id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const current = await client.query(`SELECT coalesce(max(id), 0)::int AS version FROM ${s}.migrations`);
    const from = Number(current.rows[0]?.version ?? 0);
    refuseNewer(connection, from);
    for (const migration of migrations.filter((m) => m.id > from)) {
      try {
        await client.query(
          migration.sql.replaceAll(':SCHEMA', s).replaceAll(':CHANNEL', quoteLiteral(channelFor(schema))),
        );
      } catch (error) {
        throw explainMigrationFailure(connection, migration.id, migration.name, error);
      }
      await client.query(`INSERT INTO ${s}.migrations (id, name) VALUES ($1, $2)`, [
        migration.id,
        migration.name,
      ]);
    }
    await client.query('COMMIT');
    out.release(false);
    connection.logger.info('migrated duetime schema', { schema, from, to: SCHEMA_VERSION });
    return { from, to: SCHEMA_VERSION };
  } catch (error) {
    await out.rollback();
    throw connection.error(error, 'migrate');
  }
}

/** The schema's version: 0 when the schema or its migrations table does not exist yet. */
export async function readSchemaVersion(connection: Connection): Promise<number> {
  const s = quoteIdent(connection.target.schema);
  const probe = await connection.query<{ present: boolean }>(
    'check schema',
    'SELECT to_regclass($1) IS NOT NULL AS present',
    [`${s}.migrations`],
  );
  if (!probe.rows[0]?.present) return 0;
  const result = await connection.query<{ version: number }>(
    'read schema version',
    `SELECT coalesce(max(id), 0)::int AS version FROM ${s}.migrations`,
  );
  return Number(result.rows[0]?.version ?? 0);
}

/**
 * Throws unless the schema is at exactly this package's version (used with `migrate: false`): a
 * NotFoundError when the schema or its tables do not exist, a BackendError when they are older.
 */
export async function requireCurrentSchema(connection: Connection): Promise<MigrationResult> {
  const found = await readSchemaVersion(connection);
  refuseNewer(connection, found);
  const { schema } = connection.target;
  const tried = `(tried ${describeTarget(connection.target)})`;
  if (found === 0)
    throw new NotFoundError(
      `schema ${JSON.stringify(schema)}`,
      `no duetime tables in schema ${JSON.stringify(schema)} ${tried}`,
    );
  if (found < SCHEMA_VERSION)
    throw new BackendError(
      'open',
      `schema ${JSON.stringify(schema)} is at version ${found}, this package needs version ${SCHEMA_VERSION}: run migrate() first, or open with migrate: true ${tried}`,
    );
  return { from: found, to: found };
}

function refuseNewer(connection: Connection, found: number): void {
  if (found > SCHEMA_VERSION)
    throw new NotSupportedError(
      `schema ${JSON.stringify(connection.target.schema)} is at version ${found}, written by a newer @duetime/backend-postgres; this one understands up to version ${SCHEMA_VERSION} and never downgrades a schema: upgrade the package (tried ${describeTarget(connection.target)})`,
    );
}

function explainMigrationFailure(connection: Connection, id: number, name: string, error: unknown): Error {
  const state = (error as { code?: unknown } | null)?.code;
  if (state === '42P07' || state === '42710')
    return new BackendError(
      'migrate',
      `migration ${id} (${name}) found an object duetime did not create in schema ${JSON.stringify(
        connection.target.schema,
      )}: ${(error as Error).message}; give duetime a schema of its own (option schema) (tried ${describeTarget(connection.target)})`,
      { cause: error },
    );
  return connection.error(error, `migrate (migration ${id}, ${name})`);
}
