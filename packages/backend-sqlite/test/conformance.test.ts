import { rmSync } from 'node:fs';
import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { directory, open } from './adapter.js';

runConformance({ name: 'sqlite', open, module: new URL('./adapter.ts', import.meta.url) });

afterAll(() => rmSync(directory, { recursive: true, force: true }));
