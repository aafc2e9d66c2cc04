import type { UserConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** A file that hands a whole conformance suite to `runConformance` (`test/conformance*.test.ts`). */
const CONFORMANCE_FILE = /(^|[\\/])conformance[^\\/]*\.test\.ts$/;

/**
 * Vitest's order (failed first, then longest, from its results cache), except that the files running the
 * conformance suite start first. Each is a few lines that run minutes of tests on a server backend; with
 * no results cache (a fresh clone, as in CI) vitest orders files by size, largest first, so these started
 * last and ran on alone at the end while the other worker sat idle.
 */
export class ConformanceFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const first = (file: TestSpecification) => CONFORMANCE_FILE.test(file.moduleId);
    return [...sorted.filter(first), ...sorted.filter((file) => !first(file))];
  }
}

/**
 * Test settings every package shares. Workspace packages resolve to their TypeScript sources through the
 * `source` export condition, so tests never run against a stale build; each run also writes a JSON report
 * that `.ci/run` sums into one `N passed, N failed` line.
 */
export function shared(
  overrides: { testTimeout?: number; hookTimeout?: number; fileParallelism?: boolean } = {},
): UserConfig {
  // Vitest hands the SSR resolve conditions to its worker processes as `node --conditions`; a global
  // `import` condition would make CommonJS packages (pg's `require('pg-pool')`) load ESM builds. Vite adds
  // `import`/`require` per importer by itself, so `source` plus the defaults is all that is needed.
  const conditions = ['source', 'node', 'default'];
  return {
    resolve: { conditions },
    ssr: { resolve: { conditions, externalConditions: ['source'] } },
    test: {
      include: ['test/**/*.test.ts'],
      testTimeout: overrides.testTimeout ?? 30_000,
      hookTimeout: overrides.hookTimeout ?? 30_000,
      fileParallelism: overrides.fileParallelism ?? true,
      // Two test files at a time (vitest's default is one fewer than the cores: one on a 2-core machine).
      // The tests wait on servers and timers far more than they compute.
      maxWorkers: 2,
      minWorkers: 1,
      sequence: { sequencer: ConformanceFirstSequencer },
      reporters: ['default', ['json', { outputFile: '.vitest-report.json' }]],
    },
  };
}
