import { CONFORMANCE_GROUPS, type ConformanceGroup, runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropSchemas } from './adapter.js';
import { closeAppPool, open } from './adapter-hosted.js';
import { postgresProbe } from './probe.js';

// The store's groups of the conformance suite on a backend whose every transaction the application's
// library opens (`options.transactions`): deliveries, batches and their savepoints, dead letters,
// recurrences and processes, through the library's transactions instead of duetime's. Left out:
// transactionControl (tx.sql is the library's own handle, whose COMMIT duetime does not guard), the lease,
// cursor and calendar groups (they use no store transaction), and crashes (the claims and crash counting
// it checks are the same code with either kind of transaction; processes covers SIGKILL here).
const LEFT_OUT: readonly ConformanceGroup[] = [
  'transactionControl',
  'crashes',
  'leases',
  'cursors',
  'calendar',
  'calendarFailover',
];

runConformance({
  name: 'postgres, transactions opened by the application’s library',
  ...postgresProbe((namespace) => open(namespace)),
  module: new URL('./adapter-hosted.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
  only: CONFORMANCE_GROUPS.filter((group) => !LEFT_OUT.includes(group)),
});

afterAll(async () => {
  await closeAppPool();
  await dropSchemas();
});
