import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropOpenedClusterStores, open } from './cluster-adapter.js';

// The whole suite again, on a Redis Cluster (three masters, one replica each): every store lives in the
// slot of its hash tag, and the multi-process tests' children open their own cluster clients.
runConformance({ name: 'redis-cluster', open, module: new URL('./cluster-adapter.ts', import.meta.url) });

afterAll(dropOpenedClusterStores);
