import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { deleteOpened } from './adapter.js';
import { open } from './adapter-claims.js';

// Deliveries with claims on every delivery: the backend declares exclusive claims, which the batch and
// dispatch groups check (two dispatchers never run one schedule at the same time), in processes too.
// The four-dispatcher exactly-once test runs 300 messages here (1,000 in conformance.test.ts).
runConformance({
  name: 'nats-claims',
  open,
  module: new URL('./adapter-claims.ts', import.meta.url),
  only: ['dispatcher', 'batches', 'recurring', 'processes'],
  manyMessages: 300,
});

afterAll(deleteOpened, 60_000);
