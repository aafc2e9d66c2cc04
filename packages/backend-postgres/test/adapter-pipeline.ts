import type { Backend } from '@duetime/core';
import type pg from 'pg';
import { open as openOwn } from './adapter.js';

/**
 * Opens a backend as adapter.ts does, on a pool whose connections pipeline (`pipeline: true`), for the
 * conformance suite and the child processes it starts.
 */
export function open(
  namespace: string,
  options: { applicationName?: string; poolSize?: number; claimTimeoutMs?: number } = {},
): Promise<Backend<pg.PoolClient>> {
  return openOwn(namespace, { ...options, pipeline: true });
}
