import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { dropOpenedStores, open } from './adapter.js';

runConformance({ name: 'redis', open, module: new URL('./adapter.ts', import.meta.url) });

afterAll(dropOpenedStores);
