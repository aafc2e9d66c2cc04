import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@duetime/core';
import { createSqliteBackend } from '../src/index.js';

/**
 * The conformance adapter: one SQLite file per namespace, in a temporary directory made once per test
 * file. Child processes inherit the directory through the environment, so they open the same files.
 */
const ENV = 'DUETIME_SQLITE_TEST_DIR';
export const directory = process.env[ENV] ?? mkdtempSync(join(tmpdir(), 'duetime-sqlite-'));
process.env[ENV] = directory;

export function fileFor(namespace: string): string {
  return join(directory, `${namespace}.db`);
}

/**
 * Claims lapse after 5 s instead of the default 10 s (as in the PostgreSQL suite's adapter): the tests that
 * SIGKILL a dispatcher wait for its claims to lapse, and renewals keep a live dispatcher's claims well
 * within 5 s.
 */
export async function open(namespace: string): Promise<Backend> {
  return createSqliteBackend({ filename: fileFor(namespace) }, { claimTimeoutMs: 5_000 });
}
