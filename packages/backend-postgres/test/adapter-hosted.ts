import type { Backend } from '@duetime/core';
import pg from 'pg';
import { open as openOwn, PG_URL, urlWithUser } from './adapter.js';
import { library } from './hosted-runner.js';

/** The application's pool its library's transactions run on (one per process). */
let appPool: pg.Pool | undefined;

/**
 * Opens a backend as adapter.ts does, with every transaction opened by the application's library
 * (node-postgres on a pool of the application's: `options.transactions`), for the conformance suite and
 * the child processes it starts.
 */
export async function open(
  namespace: string,
  options: { applicationName?: string; poolSize?: number; claimTimeoutMs?: number } = {},
): Promise<Backend<pg.PoolClient>> {
  appPool ??= new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 20 });
  return openOwn(namespace, { ...options, transactions: library(appPool).transactions });
}

/** Ends the application's pool (call from afterAll). */
export async function closeAppPool(): Promise<void> {
  await appPool?.end();
  appPool = undefined;
}
