import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import type { Backend } from '@duetime/core';
import pg from 'pg';
import { createPostgresBackend, type TransactionRunner } from '../src/index.js';

/** The server the tests use (trust auth, database `test`); DUETIME_PG_URL overrides it. */
export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';

/**
 * A prefix for the schemas of this test run, inherited by the child processes the conformance suite
 * starts (they get the parent's environment), so {@link dropSchemas} can drop every schema of the run,
 * including those only a killed child opened, without touching other runs going on at the same time.
 */
process.env.DUETIME_PG_TEST_RUN ??= `t${randomBytes(4).toString('hex')}`;
const RUN = process.env.DUETIME_PG_TEST_RUN;

/** The schema holding a namespace's data. */
export function schemaFor(namespace: string): string {
  return `${RUN}_${namespace}`;
}

/**
 * Opens a backend whose data lives in a schema named after `namespace` (created by the migrations), so
 * the same namespace gives the same data and a fresh one an empty, isolated schema. Fails at once,
 * naming the service and how to start it, when PostgreSQL does not answer.
 */
export async function open(
  namespace: string,
  options: {
    applicationName?: string;
    poolSize?: number;
    claimTimeoutMs?: number;
    transactions?: TransactionRunner<pg.PoolClient>;
    pipeline?: boolean;
  } = {},
): Promise<Backend<pg.PoolClient>> {
  try {
    return await createPostgresBackend(
      { connectionString: PG_URL },
      {
        schema: schemaFor(namespace),
        poolSize: 6,
        connectTimeoutMs: 5_000,
        claimTimeoutMs: 5_000,
        ...options,
      },
    );
  } catch (error) {
    if ((error as { transient?: boolean }).transient)
      throw new Error(
        `PostgreSQL is not reachable at ${PG_URL} (set DUETIME_PG_URL to use another server); start it with \`bash scripts/services.sh up\`: ${(error as Error).message}`,
        { cause: error },
      );
    throw error;
  }
}

/** A plain client for assertions and administration in tests. */
export async function adminClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: urlWithUser(PG_URL) });
  await client.connect();
  return client;
}

/** The URL with the operating-system user filled in when it names none (as libpq and the backend do). */
export function urlWithUser(url: string): string {
  const withUser = new URL(url);
  if (withUser.username) return url;
  // pg's own default (the USER environment variable), else the operating-system user, as the backend does.
  withUser.username = new pg.Client({ connectionString: url }).user ?? userInfo().username;
  return withUser.toString();
}

/** Drops every schema of this test run (call from afterAll). */
export async function dropSchemas(): Promise<void> {
  const client = await adminClient();
  try {
    const found = await client.query('SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)', [
      `${RUN}_`,
    ]);
    for (const row of found.rows) await client.query(`DROP SCHEMA IF EXISTS "${row.nspname}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** The error a promise rejects with (fails the test when it resolves). */
export async function rejection(promise: Promise<unknown>): Promise<Error> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: Error) => error,
  );
}
