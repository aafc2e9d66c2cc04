import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@duetime/core';
import { createFileBackend, fileBackendCapabilities } from './file-backend.js';
import { isAlive, ownerName, ownerPid } from './lock.js';

/**
 * The conformance adapter: what `runConformance` and `duetime conformance src/adapter.ts` load.
 *
 * Each namespace is a directory under one root per run, `<tmp>/duetime-file-journal/<pid>-<nonce>`. The
 * process that makes the root hands it to the child processes the suite starts through the environment,
 * so they open the same directories. Test runners end their workers with a signal, so instead of cleaning
 * up at exit, each run removes the roots of runs whose process is gone (the lock's stale rule again).
 */
const ROOT = 'DUETIME_FILE_JOURNAL_ROOT';
export const root = process.env[ROOT] ?? makeRoot();

function makeRoot(): string {
  const base = join(tmpdir(), 'duetime-file-journal');
  mkdirSync(base, { recursive: true });
  for (const name of readdirSync(base)) {
    const pid = ownerPid(name);
    if (pid !== undefined && !isAlive(pid)) rmSync(join(base, name), { recursive: true, force: true });
  }
  const dir = join(base, ownerName());
  mkdirSync(dir);
  process.env[ROOT] = dir;
  return dir;
}

/** Declared to the suite, which checks that the backend declares the same. */
export const capabilities = fileBackendCapabilities;

/** Same namespace, same data; a new namespace, an empty directory. */
export function open(namespace: string): Promise<Backend> {
  // A small compaction threshold, so that the suite's runs compact while other processes read.
  return createFileBackend({ directory: join(root, namespace), compactBytes: 256 * 1024 });
}
