import type { Harness, ResolvedCapabilities, SqlProbe } from './harness.js';

/** What each group of conformance tests receives. */
export interface SuiteContext {
  /** The current test's harness (fresh per test; everything it opened is closed after the test). */
  harness(): Harness;
  capabilities: ResolvedCapabilities;
  /** The target's SQL probe, when it gave one (backends that declare `sql`). */
  sql?: SqlProbe;
  /**
   * Messages in the dispatcher group's test of four dispatchers committing each effect exactly once
   * (default 1,000; see `ConformanceOptions.manyMessages`).
   */
  manyMessages?: number;
}
