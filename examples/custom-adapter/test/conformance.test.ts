import { rmSync } from 'node:fs';
import { runConformance } from '@duetime/conformance';
import { afterAll } from 'vitest';
import { capabilities, open, root } from '../src/adapter.js';

runConformance({
  name: 'file-journal',
  open,
  capabilities,
  module: new URL('../src/adapter.ts', import.meta.url),
});

afterAll(() => rmSync(root, { recursive: true, force: true }));
