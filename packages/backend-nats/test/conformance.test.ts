import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { deleteOpened, open } from './adapter.js';

runConformance({ name: 'nats', open, module: new URL('./adapter.ts', import.meta.url) });

afterAll(deleteOpened, 60_000);
