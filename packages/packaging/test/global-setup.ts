import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { type PublishedPackage, packAll } from './tarballs.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Each published package's tarball, packed once for every test file. */
    tarballs: Record<PublishedPackage, string>;
  }
}

/** Packs the tarballs once; removes them when the run ends. */
export default async function setup(project: TestProject): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), 'duetime-tarballs-'));
  project.provide('tarballs', await packAll(dir));
  return () => rmSync(dir, { recursive: true, force: true });
}
