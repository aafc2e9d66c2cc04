import { createPostgresBackend } from '@duetime/backend-postgres';
import { Dispatcher, type DispatcherOptions } from '@duetime/core';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';

/** The server the tests use (trust auth, database `test`); DUETIME_PG_URL overrides it. */
export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';

/** PG_URL with the login name as its user when it names none (libraries differ in their default). */
export function urlWithUser(): string {
  const url = new URL(PG_URL);
  if (!url.username) url.username = process.env.PGUSER ?? process.env.USER ?? 'postgres';
  return url.toString();
}

/** A pool on the test server, failing with how to start it when the server is not reachable. */
export async function reachablePool(max: number): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: urlWithUser(), max });
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    throw new Error(
      `PostgreSQL is not reachable at ${urlWithUser()} (set DUETIME_PG_URL to use another server); start it with \`bash scripts/services.sh up\`: ${(error as Error).message}`,
    );
  }
  return pool;
}

export type Backend = Awaited<ReturnType<typeof createPostgresBackend>>;

/**
 * A PostgreSQL backend in a schema of this file's own (`<name>_<pid>`), opened before the file's tests and
 * dropped after them; `setup` runs once it exists (the tests' own tables).
 */
export function useBackend(name: string, setup: (pool: pg.Pool, schema: string) => Promise<void>) {
  const schema = `${name}_${process.pid}`;
  const server = { schema, url: urlWithUser() } as {
    schema: string;
    url: string;
    pool: pg.Pool;
    backend: Backend;
  };
  beforeAll(async () => {
    server.pool = await reachablePool(8);
    server.backend = await createPostgresBackend({ pool: server.pool }, { schema });
    await setup(server.pool, schema);
  });
  afterAll(async () => {
    await server.backend?.close();
    await server.pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await server.pool?.end();
  });
  return server;
}

/** Runs a dispatcher on `backend` until `done` answers true (or 20 s pass), then drains it. */
export async function dispatchUntil(
  backend: Backend,
  options: Omit<DispatcherOptions<never, pg.PoolClient>, 'store'>,
  done: () => boolean | Promise<boolean>,
): Promise<void> {
  const dispatcher = new Dispatcher({ store: backend.store, rescanInterval: 100, ...options });
  const running = dispatcher.run();
  const deadline = Date.now() + 20_000;
  while (!(await done()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  await dispatcher.drain();
  await running;
}
