import { defineConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.js';

const config = shared();
// Vitest hands the SSR resolve conditions to its worker processes as `node --conditions`. A global
// `import` condition makes pg's own `require('pg-pool')` pick pg-pool's ESM build (its exports map has
// `import` and `require`), which breaks `class extends Pool`. Vite adds `import`/`require` per importer
// by itself, so the workspace's `source` condition plus the defaults suffice here.
if (config.ssr?.resolve) config.ssr.resolve.conditions = ['source', 'node', 'default'];

export default defineConfig(config);
