import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { deleteOpened } from './adapter.js';
import { open } from './adapter-claims.js';

// Deliveries with claims on every delivery: the backend declares exclusive claims, which the batch and
// dispatch groups check (two dispatchers never run one schedule at the same time), in processes too.
runConformance({
  name: 'nats-claims',
  open,
  module: new URL('./adapter-claims.ts', import.meta.url),
  only: ['dispatcher', 'batches', 'recurring', 'processes'],
});

afterAll(deleteOpened, 60_000);
