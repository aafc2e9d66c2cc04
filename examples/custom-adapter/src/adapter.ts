import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@duetime/core';
import { createFileBackend, fileBackendCapabilities } from './file-backend.js';

/**
 * The conformance adapter: what `runConformance` and `duetime conformance src/adapter.ts` load.
 *
 * Each namespace is a directory under one temporary root. The process that makes the root passes it to
 * the child processes the suite starts through the environment (so they open the same directories) and
 * removes it when it exits.
 */
const ROOT = 'DUETIME_FILE_JOURNAL_ROOT';
export const root = process.env[ROOT] ?? mkdtempSync(join(tmpdir(), 'duetime-file-journal-'));
if (process.env[ROOT] === undefined) {
  process.env[ROOT] = root;
  process.once('exit', () => rmSync(root, { recursive: true, force: true }));
}

/** Declared to the suite, which checks that the backend declares the same. */
export const capabilities = fileBackendCapabilities;

/** Same namespace, same data; a new namespace, an empty directory. */
export function open(namespace: string): Promise<Backend> {
  // A small compaction threshold, so that the suite's runs compact while other processes read.
  return createFileBackend({ directory: join(root, namespace), compactBytes: 256 * 1024 });
}
