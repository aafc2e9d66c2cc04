import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { deleteOpened } from './adapter.js';
import { open } from './adapter-cluster.js';

// The whole suite on the three-node cluster, with every stream replicated on all three servers (R3).
runConformance({ name: 'nats-cluster', open, module: new URL('./adapter-cluster.ts', import.meta.url) });

afterAll(deleteOpened, 60_000);
