import { defineConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.js';

// Packing and installing take a while and use the network (the npm registry): generous deadlines, and the
// tarballs are packed once for every test file (global setup).
const config = shared({ testTimeout: 240_000, hookTimeout: 240_000 });
export default defineConfig({ ...config, test: { ...config.test, globalSetup: ['./test/global-setup.ts'] } });
