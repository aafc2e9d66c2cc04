import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import { createPostgresBackend, type PGliteLike } from '@duetime/backend-postgres';
import { Dispatcher, type DispatcherOptions } from '@duetime/core';
import pg from 'pg';
import { pgliteCount } from '../executor.js';
import type { BindingConformanceOptions, BindingTarget, GroupContext } from './types.js';

type Backend = GroupContext['server']['backend'];

/** The server's URL (the option, `DUETIME_PG_URL`, or the local test server), with a user name in it. */
export function serverUrl(options: BindingConformanceOptions): string {
  const url = new URL(options.url ?? process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test');
  // Libraries differ in the user they default to: name pg's (the USER variable), else the OS user.
  if (!url.username) url.username = process.env.PGUSER ?? process.env.USER ?? userInfo().username;
  return url.toString();
}

/** A schema name of this run: the target's name as an identifier, and a random suffix. */
export function schemaFor(name: string): string {
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .slice(0, 32);
  return `bindings_${slug}_${randomBytes(4).toString('hex')}`;
}

/**
 * Opens the group's server: a pool (failing with how to point the group elsewhere when the server does
 * not answer), a PostgreSQL backend in the run's schema, the group's tables, and the target's library.
 */
export async function openServer(
  server: Partial<GroupContext['server']>,
  target: BindingTarget<unknown>,
  options: BindingConformanceOptions = {},
): Promise<void> {
  if (options.pglite) {
    const db = await options.pglite();
    server.pglite = db;
    server.pool = pgliteReads(db);
    server.library = await target.open({ url: server.url!, schema: server.schema!, pglite: db });
    server.backend = (await createPostgresBackend(
      { pglite: db },
      {
        schema: server.schema,
        ...(target.transactions ? { transactions: target.transactions(server.library) } : {}),
      },
    )) as Backend;
    await tables(server.pool, server.schema!);
    return;
  }
  const pool = new pg.Pool({ connectionString: server.url, max: 8 });
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    throw new Error(
      `PostgreSQL is not reachable at ${server.url} (give \`url\`, or set DUETIME_PG_URL): ${(error as Error).message}`,
    );
  }
  server.pool = pool;
  server.library = await target.open({ url: server.url!, schema: server.schema! });
  server.backend = (await createPostgresBackend(
    { pool },
    {
      schema: server.schema,
      ...(target.transactions ? { transactions: target.transactions(server.library) } : {}),
    },
  )) as Backend;
  await tables(pool, server.schema!);
}

/** The group's own tables. */
async function tables(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, n integer)`);
  await pool.query(`CREATE TABLE "${schema}".effects (key text PRIMARY KEY, via text NOT NULL)`);
}

/** What the group reads with on a PGlite database: statements outside any transaction, as a pool's. */
function pgliteReads(db: PGliteLike): pg.Pool {
  return {
    // A pool, as far as the refusals of the processor direction can tell.
    totalCount: 0,
    async query(text: string, values?: unknown[]) {
      const result = await db.query(text, values);
      return { rows: result.rows, rowCount: pgliteCount(result.affectedRows, result.rows.length) };
    },
    async end() {},
  } as unknown as pg.Pool;
}

/** Closes what {@link openServer} opened and drops the run's schema. */
export async function closeServer(
  server: Partial<GroupContext['server']>,
  target: BindingTarget<unknown>,
): Promise<void> {
  try {
    // The backend first: with `transactions`, its transactions run on the library.
    await server.backend?.close();
    if (server.library !== undefined) await target.close(server.library);
    await server.pool?.query(`DROP SCHEMA IF EXISTS "${server.schema}" CASCADE`);
  } finally {
    await server.pool?.end();
  }
}

/** The keys (or ids) of the rows of one of the group's tables under `prefix`, in order. */
export async function keysIn(
  server: GroupContext['server'],
  table: 'orders' | 'effects',
  prefix: string,
): Promise<string[]> {
  const column = table === 'orders' ? 'id' : 'key';
  const { rows } = await server.pool.query<{ k: string }>(
    `SELECT ${column} AS k FROM "${server.schema}".${table} WHERE ${column} LIKE $1 ORDER BY ${column}`,
    [`${prefix.replace(/[\\%_]/g, '\\$&')}%`],
  );
  return rows.map((r) => r.k);
}

/** The keys of the active schedules under `prefix`. */
export async function scheduledUnder(server: GroupContext['server'], prefix: string): Promise<string[]> {
  return (await server.backend.store.pageSchedules({ prefix })).items.map((s) => s.key);
}

/**
 * Runs a dispatcher on `backend` until `done` answers true, then drains it. Fails when `done` has not
 * answered true within `timeoutMs` (default 20 s). `failed` collects each failed attempt as `<key> <error name>`.
 */
export async function dispatchUntil(
  backend: Backend,
  options: Omit<DispatcherOptions<never, pg.PoolClient>, 'store'>,
  done: () => boolean | Promise<boolean>,
  { timeoutMs = 20_000, failed }: { timeoutMs?: number; failed?: string[] } = {},
): Promise<void> {
  const dispatcher = new Dispatcher({ store: backend.store, rescanInterval: 50, ...options });
  // Each failed attempt as `<key> <error name>`, for the cases that expect none (or some).
  if (failed)
    dispatcher.on('failed', (event) => {
      const name = event.error instanceof Error ? event.error.name : typeof event.error;
      failed.push(`${event.schedule.key} ${name}`);
    });
  const running = dispatcher.run();
  const deadline = Date.now() + timeoutMs;
  let finished = await done();
  while (!finished && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
    finished = await done();
  }
  await dispatcher.drain();
  await running;
  if (!finished) throw new Error(`the dispatcher did not get there within ${timeoutMs} ms`);
}
