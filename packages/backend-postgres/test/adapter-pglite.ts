import type { Backend } from '@duetime/core';
import { PGlite } from '@electric-sql/pglite';
import type pg from 'pg';
import { createPostgresBackend } from '../src/index.js';
import { schemaFor } from './adapter.js';

/** The PGlite database of this process (in memory), made on first use: one session for every backend. */
let database: Promise<PGlite> | undefined;

export function pglite(): Promise<PGlite> {
  database ??= PGlite.create();
  return database;
}

/** Opens a backend on this process's PGlite database, its data in a schema named after `namespace`. */
export async function open(
  namespace: string,
  options: { claimTimeoutMs?: number } = {},
): Promise<Backend<pg.PoolClient>> {
  return createPostgresBackend(
    { pglite: await pglite() },
    { schema: schemaFor(namespace), claimTimeoutMs: 5_000, ...options },
  );
}

/** Closes the database (call from afterAll). */
export async function closePglite(): Promise<void> {
  const db = await database;
  database = undefined;
  await db?.close();
}
