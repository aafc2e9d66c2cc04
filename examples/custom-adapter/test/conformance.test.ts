import { rmSync } from 'node:fs';
import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { capabilities, drop, open, root } from './adapter.js';

runConformance({
  name: 'file',
  open,
  drop,
  capabilities,
  module: new URL('./adapter.ts', import.meta.url),
});

afterAll(() => rmSync(root, { recursive: true, force: true }));
