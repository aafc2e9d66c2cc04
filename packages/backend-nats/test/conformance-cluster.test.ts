import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { deleteOpened } from './adapter.js';
import { open } from './adapter-cluster.js';

// The whole suite on the three-node cluster, with every stream replicated on all three servers (R3). The
// four-dispatcher exactly-once test runs 300 messages here: its 1,000 run in conformance.test.ts, and on
// three replicas every one costs three times the writes.
runConformance({
  name: 'nats-cluster',
  open,
  module: new URL('./adapter-cluster.ts', import.meta.url),
  manyMessages: 300,
});

afterAll(deleteOpened, 60_000);
