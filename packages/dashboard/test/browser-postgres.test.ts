import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import { createPostgresBackend } from '@duetime/backend-postgres';
import pg from 'pg';
import { afterAll } from 'vitest';
import { browserSuite } from './browser.js';
import { hostileSuite } from './hostile.js';

/** The server the tests use (trust auth, database `test`); DUETIME_PG_URL overrides it. */
const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';
const SCHEMA = `dashboard_${randomBytes(4).toString('hex')}`;
/** The hostile-data suite's own schema, so that each suite sees only its own data. */
const HOSTILE_SCHEMA = `${SCHEMA}_hostile`;

afterAll(async () => {
  // The operating-system user when the URL names none, as the backend (and psql) do.
  const url = new URL(PG_URL);
  if (!url.username) url.username = process.env.USER || userInfo().username;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    for (const schema of [SCHEMA, HOSTILE_SCHEMA])
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end().catch(() => undefined);
  }
});

async function open(schema: string) {
  try {
    return await createPostgresBackend({ connectionString: PG_URL }, { schema, connectTimeoutMs: 5_000 });
  } catch (error) {
    if ((error as { transient?: boolean }).transient)
      throw new Error(
        `PostgreSQL is not reachable at ${PG_URL} (set DUETIME_PG_URL to use another server); start it with \`bash scripts/services.sh up\`: ${(error as Error).message}`,
        { cause: error },
      );
    throw error;
  }
}

browserSuite('PostgreSQL', () => open(SCHEMA));
hostileSuite('PostgreSQL', () => open(HOSTILE_SCHEMA));
