import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { calendarFailoverTests } from './calendar/failover.js';
import { calendarTests } from './calendar/scheduler.js';
import { CONFORMANCE_GROUPS, type ConformanceGroup } from './groups.js';
import { type ConformanceTarget, Harness, resolveCapabilities } from './harness.js';
import { cursorTests, leaseTests } from './leases/leases.js';
import { batchTests } from './store/batches.js';
import { crashTests } from './store/crashes.js';
import { deadLetterTests } from './store/dead-letters.js';
import { dispatcherTests } from './store/dispatch.js';
import { scheduleLifecycleTests, sharingTests } from './store/lifecycle.js';
import { operationTests } from './store/operations.js';
import { processTests } from './store/processes.js';
import { pushChannelTests } from './store/push.js';
import { readTests } from './store/reads.js';
import { recurringTests } from './store/recurring.js';
import { TRANSACTION_CONTROL, transactionControlTests } from './store/transaction-control.js';
import type { SuiteContext } from './suite.js';

export {
  CALENDAR_RUNS,
  calendarRuns,
  gapsAndDuplicates,
  loadRuns,
  Partition,
  type RunEvent,
  recordRun,
} from './calendar/fixtures.js';
export { type WatchOptions, type WorkerProcess, watchChild } from './child-process.js';
export {
  type ConformanceCapabilities,
  type ConformanceTarget,
  freshNamespace,
  Harness,
  type ResolvedCapabilities,
  resolveCapabilities,
  type SqlProbe,
  waitFor,
} from './harness.js';
export { appliedCount, effectMessage, effects } from './store/fixtures.js';
export type { SuiteContext } from './suite.js';
export {
  batchTests,
  CONFORMANCE_GROUPS,
  type ConformanceGroup,
  calendarFailoverTests,
  calendarTests,
  crashTests,
  cursorTests,
  deadLetterTests,
  dispatcherTests,
  leaseTests,
  operationTests,
  processTests,
  pushChannelTests,
  readTests,
  recurringTests,
  scheduleLifecycleTests,
  sharingTests,
  TRANSACTION_CONTROL,
  transactionControlTests,
};

/** The groups of the suite, in the order they run. */
export const conformanceGroups = {
  schedules: scheduleLifecycleTests,
  sharing: sharingTests,
  dispatcher: dispatcherTests,
  batches: batchTests,
  deadLetters: deadLetterTests,
  recurring: recurringTests,
  operations: operationTests,
  reads: readTests,
  pushChannel: pushChannelTests,
  transactionControl: transactionControlTests,
  processes: processTests,
  crashes: crashTests,
  leases: leaseTests,
  cursors: cursorTests,
  calendar: calendarTests,
  calendarFailover: calendarFailoverTests,
} as const satisfies Record<ConformanceGroup, (context: SuiteContext) => void>;

/**
 * Groups that run backends in child processes only: not registered for backends that declare
 * `multiProcess: false`. (Other groups that use processes, such as `crashes`, register a weaker check
 * for those backends instead.)
 */
const PROCESS_GROUPS: ReadonlySet<string> = new Set(['processes', 'calendarFailover']);

export interface ConformanceOptions extends ConformanceTarget {
  /** Run only these groups (default: all). */
  only?: ConformanceGroup[];
  /**
   * Messages in the dispatcher group's test of four dispatchers committing each effect exactly once
   * (default 1,000; a multiple of 100). A second configuration of a backend whose main one runs the
   * default (a replicated cluster, claims on every delivery) can pass fewer to keep its run short.
   */
  manyMessages?: number;
}

/**
 * Registers the conformance suite as vitest tests against a backend. Call it at the top level of a test
 * file:
 *
 * ```ts
 * import { runConformance } from '@duetime/conformance';
 * import { open } from './adapter.js';
 * runConformance({ name: 'my-store', open, module: new URL('./adapter.ts', import.meta.url) });
 * ```
 *
 * Capabilities come from `backend.capabilities` (or `options.capabilities`); the suite checks the weaker
 * promise where a backend declares one.
 */
export function runConformance(options: ConformanceOptions): void {
  const unknown = (options.only ?? []).filter((group) => !CONFORMANCE_GROUPS.includes(group));
  if (unknown.length > 0)
    throw new Error(
      `runConformance: unknown group ${unknown.map((g) => JSON.stringify(g)).join(', ')} in \`only\`; the groups are ${CONFORMANCE_GROUPS.join(', ')}`,
    );
  const many = options.manyMessages;
  if (many !== undefined && (!Number.isInteger(many) || many < 100 || many % 100 !== 0))
    throw new Error(`runConformance: manyMessages must be a multiple of 100 (at least 100), not ${many}`);
  const capabilities = resolveCapabilities(options.capabilities);
  describe(`conformance: ${options.name}`, () => {
    let current: Harness | undefined;
    const context: SuiteContext = {
      harness: () => {
        if (!current) throw new Error('harness used outside a test');
        return current;
      },
      capabilities,
      ...(options.manyMessages !== undefined ? { manyMessages: options.manyMessages } : {}),
      ...(options.sql ? { sql: options.sql } : {}),
    };
    beforeEach(() => {
      current = new Harness(options, capabilities);
    });
    afterEach(async () => {
      await current?.cleanup();
      current = undefined;
    });

    it('opens an isolated backend whose declared capabilities match the ones under test', async () => {
      const backend = await context.harness().open();
      expect(typeof backend.name).toBe('string');
      expect(typeof backend.store.transact).toBe('function');
      expect(await backend.store.listSchedules()).toEqual([]);
      const declared = resolveCapabilities(backend.capabilities);
      expect(
        { multiProcess: declared.multiProcess, durable: declared.durable },
        'pass the weaker guarantees the backend declares as `capabilities` to runConformance',
      ).toEqual({ multiProcess: capabilities.multiProcess, durable: capabilities.durable });
      if (resolveCapabilities(backend.capabilities).sql && !options.sql) {
        expect.fail(
          'a backend that declares `sql` needs a `sql` probe in runConformance, to test its savepoints',
        );
      }
      if (capabilities.multiProcess) {
        expect(options.module, 'a multi-process backend needs `module` for the process tests').toBeDefined();
      }
    });

    const groups = (options.only ?? [...CONFORMANCE_GROUPS]).filter(
      (group) => !PROCESS_GROUPS.has(group) || capabilities.multiProcess,
    );
    for (const group of groups) {
      describe(group, () => {
        conformanceGroups[group](context);
      });
    }
  });
}
