import { type ConformanceGroup, runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropSchemas } from './adapter.js';
import { open } from './adapter-pipeline.js';
import { postgresProbe } from './probe.js';

// The store's groups on a pool whose connections pipeline (`pipeline: true`): every statement duetime
// sends (claims, BEGIN and savepoints, consumption, reads inside a transaction) on such a connection, the
// batches group's `pipeline: true` dispatchers running processors at once, and crashes (a process
// SIGKILLed in the middle of a pipelined batch). The dispatcher group's cases (its dispatchers run processors
// one by one), processes and the groups that use no store transaction run in conformance.test.ts.
const GROUPS: readonly ConformanceGroup[] = [
  'schedules',
  'batches',
  'deadLetters',
  'recurring',
  'operations',
  'transactionControl',
  'crashes',
];

runConformance({
  name: 'postgres, connections that pipeline',
  ...postgresProbe((namespace) => open(namespace)),
  module: new URL('./adapter-pipeline.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
  only: [...GROUPS],
});

afterAll(dropSchemas);
