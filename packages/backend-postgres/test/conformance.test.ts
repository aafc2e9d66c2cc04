import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropSchemas, open } from './adapter.js';
import { postgresProbe } from './probe.js';

runConformance({
  name: 'postgres',
  ...postgresProbe((namespace) => open(namespace)),
  module: new URL('./adapter.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
});

afterAll(dropSchemas);
