import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropSchemas, open } from './adapter.js';

runConformance({
  name: 'postgres',
  open,
  module: new URL('./adapter.ts', import.meta.url),
  capabilities: { sql: true, exclusiveClaims: true },
});

afterAll(dropSchemas);
