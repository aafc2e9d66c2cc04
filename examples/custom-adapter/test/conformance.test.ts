import { runConformance } from '@duetime/conformance';
import { capabilities, open } from '../src/adapter.js';

runConformance({
  name: 'file-journal',
  open,
  capabilities,
  module: new URL('../src/adapter.ts', import.meta.url),
});
