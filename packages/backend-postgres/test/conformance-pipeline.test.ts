import { type ConformanceGroup, runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropSchemas, open } from './adapter.js';
import { postgresProbe } from './probe.js';

// The store's in-process groups on a pool whose connections pipeline (`pipeline: true`): every statement
// duetime sends (claims, BEGIN and savepoints, consumption, reads inside a transaction) on such a
// connection, and the batches group's `pipeline: true` dispatchers running processors at once. The
// groups that start processes, and those that use no store transaction, run in conformance.test.ts.
const GROUPS: readonly ConformanceGroup[] = [
  'schedules',
  'dispatcher',
  'batches',
  'deadLetters',
  'recurring',
  'operations',
  'transactionControl',
];

runConformance({
  name: 'postgres, connections that pipeline',
  ...postgresProbe((namespace) => open(namespace, { pipeline: true })),
  module: new URL('./adapter.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
  only: [...GROUPS],
});

afterAll(dropSchemas);
