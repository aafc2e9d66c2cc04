import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@duetime/core';
import { createFileBackend } from '../src/file-backend.js';

/**
 * The conformance adapter module: what `runConformance` and `duetime conformance test/adapter.ts` load.
 * Each namespace is a directory under one root per run; the process that makes the root hands it to the
 * child processes the suite starts through the environment, so they open the same directories.
 */
const ROOT = 'DUETIME_FILE_BACKEND_ROOT';
export const root = process.env[ROOT] ?? mkdtempSync(join(tmpdir(), 'duetime-file-backend-'));
process.env[ROOT] = root;

/** Declared to the suite, which checks that the backend declares the same. */
export const capabilities = { multiProcess: true, durable: true, sql: false, exclusiveClaims: false };

/** Same namespace, same data; a new namespace, an empty directory. */
export function open(namespace: string): Promise<Backend> {
  // Claims of a dead process lapse at once; a short lapse also covers hung ones in the suite's time.
  return createFileBackend(join(root, namespace), { claimLapseMs: 5000 });
}

/** Deletes a namespace's data: the suite calls it after each test. */
export async function drop(namespace: string): Promise<void> {
  // A write that lands while the directory is removed (a stopped scheduler's last one) fails the removal
  // with ENOTEMPTY: Node retries it.
  await rm(join(root, namespace), { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
}
