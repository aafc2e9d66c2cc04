import { defineConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.js';

// One file at a time: every file starts processes or servers of its own, and the machine has 2 cores.
const config = shared({ testTimeout: 600_000, hookTimeout: 120_000, fileParallelism: false });
// As in backend-postgres: a global `import` condition would make pg's own require('pg-pool') load
// pg-pool's ESM build. The workspace's `source` condition plus the defaults suffice.
if (config.ssr?.resolve) config.ssr.resolve.conditions = ['source', 'node', 'default'];

export default defineConfig(config);
