import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { BackendError } from '@duetime/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresBackend, migrate } from '../src/index.js';
import { adminClient, PG_URL, urlWithUser } from './adapter.js';

/** The URL of the test server with another user, password, database or port. */
function variant(change: { user?: string; password?: string; database?: string; port?: number }): string {
  const url = new URL(urlWithUser(PG_URL));
  if (change.user !== undefined) url.username = change.user;
  if (change.password !== undefined) url.password = change.password;
  if (change.database !== undefined) url.pathname = `/${change.database}`;
  if (change.port !== undefined) url.port = String(change.port);
  return url.toString();
}

async function failure(promise: Promise<unknown>): Promise<BackendError> {
  const error = await promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BackendError);
  return error as BackendError;
}

const suffix = randomBytes(4).toString('hex');
const SECRET = `s3cret-${suffix}`;
const url = new URL(urlWithUser(PG_URL));

describe('connection failures name what was tried and never hang', () => {
  let silent: Server;
  let silentPort = 0;
  const admin: { client?: pg.Client } = {};

  beforeAll(async () => {
    // Accepts TCP connections and never answers: only a timeout can end a connection attempt.
    silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    silentPort = (silent.address() as { port: number }).port;
    admin.client = await adminClient();
    await admin.client.query(`CREATE ROLE dt_nologin_${suffix} NOLOGIN PASSWORD '${SECRET}'`);
    await admin.client.query(`CREATE ROLE dt_owner_${suffix} NOLOGIN`);
    await admin.client.query(`CREATE ROLE dt_user_${suffix} LOGIN PASSWORD '${SECRET}'`);
    await admin.client.query(`CREATE SCHEMA dt_owned_${suffix} AUTHORIZATION dt_owner_${suffix}`);
  });

  afterAll(async () => {
    silent.close();
    const client = admin.client;
    if (!client) return;
    await client.query(`DROP SCHEMA IF EXISTS dt_owned_${suffix} CASCADE`);
    for (const role of ['nologin', 'owner', 'user'])
      await client.query(`DROP ROLE IF EXISTS dt_${role}_${suffix}`);
    await client.end();
  });

  it('a refused port: transient, naming host, port, database, schema and user', async () => {
    const error = await failure(
      createPostgresBackend({ connectionString: variant({ port: 1, password: SECRET }) }, { schema: 'dt_x' }),
    );
    expect(error.transient).toBe(true);
    expect(error.message).toContain(`${url.hostname}:1`);
    expect(error.message).toContain('connection refused');
    expect(error.message).toContain('database "test"');
    expect(error.message).toContain('schema "dt_x"');
    expect(error.message).toContain(`user "${url.username}"`);
    expect(error.message).not.toContain(SECRET);
  });

  it('a user that does not exist: authentication failed, not transient, password never shown', async () => {
    const error = await failure(
      createPostgresBackend({ connectionString: variant({ user: `dt_nobody_${suffix}`, password: SECRET }) }),
    );
    expect(error.transient).toBe(false);
    expect(error.message).toMatch(/authentication failed/);
    expect(error.message).toContain(`user "dt_nobody_${suffix}"`);
    expect(error.message).toContain(`:${url.port || 5432}`);
    expect(error.message).not.toContain(SECRET);
  });

  it('a role that may not log in, with a password: refused with the role named', async () => {
    const error = await failure(
      migrate({ connectionString: variant({ user: `dt_nologin_${suffix}`, password: SECRET }) }),
    );
    expect(error.message).toMatch(/authentication failed.*not permitted to log in/);
    expect(error.message).toContain(`user "dt_nologin_${suffix}"`);
    expect(error.message).not.toContain(SECRET);
  });

  it('a missing database: named in the error', async () => {
    const error = await failure(
      createPostgresBackend({ connectionString: variant({ database: `dt_missing_${suffix}` }) }),
    );
    expect(error.transient).toBe(false);
    expect(error.message).toContain(`database "dt_missing_${suffix}" does not exist`);
  });

  it('a server that never answers: fails after the connection timeout', async () => {
    const error = await failure(
      createPostgresBackend({ connectionString: variant({ port: silentPort }) }, { connectTimeoutMs: 300 }),
    );
    expect(error.transient).toBe(true);
    expect(error.message).toMatch(/connection timeout|answer within/);
    expect(error.message).toContain(`:${silentPort}`);
  });

  it('an application pool without a connection timeout still fails within connectTimeoutMs', async () => {
    const pool = new pg.Pool({ connectionString: variant({ port: silentPort }) });
    pool.on('error', () => {});
    try {
      const error = await failure(createPostgresBackend({ pool }, { connectTimeoutMs: 300 }));
      expect(error.message).toMatch(/answer within 300 ms/);
      expect(pool.ended).toBe(false);
    } finally {
      void pool.end().catch(() => {});
    }
  });

  it('a schema owned by someone else: permission denied, naming the schema and the user', async () => {
    const error = await failure(
      createPostgresBackend(
        { connectionString: variant({ user: `dt_user_${suffix}`, password: SECRET }) },
        { schema: `dt_owned_${suffix}` },
      ),
    );
    expect(error.transient).toBe(false);
    expect(error.message).toMatch(/permission denied/);
    expect(error.message).toContain(`schema "dt_owned_${suffix}"`);
    expect(error.message).toContain(`user "dt_user_${suffix}"`);
    expect(error.message).not.toContain(SECRET);
  });

  it('a role without CREATE on the database cannot create a missing schema: permission denied', async () => {
    const error = await failure(
      createPostgresBackend(
        { connectionString: variant({ user: `dt_user_${suffix}` }) },
        { schema: `dt_new_${suffix}` },
      ),
    );
    expect(error.message).toMatch(/permission denied for database/);
    expect(error.message).toContain(`schema "dt_new_${suffix}"`);
  });
});
