import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MODE } from './mode.js';

/**
 * Where runs leave their figures: `node_modules/.cache/reliability/<mode>/<suite>-<backend>.json` in this
 * package (out of git and the formatter's way); `pnpm --filter @duetime/reliability run table` prints them.
 */
export const RESULTS_DIR = fileURLToPath(new URL('../node_modules/.cache/reliability/', import.meta.url));

export interface SuiteResult {
  suite: string;
  backend: string;
  seed: number;
  mode: string;
  finishedAt: string;
  figures: Record<string, number>;
}

/** Records one suite's figures on one backend (overwriting the previous run's). */
export function recordResult(
  suite: string,
  backend: string,
  seed: number,
  figures: Record<string, number>,
): void {
  const dir = join(RESULTS_DIR, MODE);
  mkdirSync(dir, { recursive: true });
  const result: SuiteResult = {
    suite,
    backend,
    seed,
    mode: MODE,
    finishedAt: new Date().toISOString(),
    figures,
  };
  writeFileSync(join(dir, `${suite}-${backend}.json`), `${JSON.stringify(result, null, 2)}\n`);
}

/** Every recorded result of a mode. */
export function readResults(mode: string): SuiteResult[] {
  const dir = join(RESULTS_DIR, mode);
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
  return files.map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as SuiteResult);
}
