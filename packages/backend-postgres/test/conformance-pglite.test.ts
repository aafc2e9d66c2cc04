import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { closePglite, open } from './adapter-pglite.js';
import { postgresProbe } from './probe.js';

// The whole conformance suite on PGlite: PostgreSQL in this process, one session, so one process
// (`multiProcess: false`: the suite's child-process groups are left out by the suite itself).
runConformance({
  name: 'postgres on PGlite',
  ...postgresProbe((namespace) => open(namespace)),
  capabilities: { multiProcess: false, sql: true, exclusiveClaims: true },
});

afterAll(closePglite);
