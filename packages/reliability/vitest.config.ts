import { defineConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.js';

// One file at a time: every file starts processes or servers of its own, and the machine has 2 cores.
export default defineConfig(shared({ testTimeout: 600_000, hookTimeout: 120_000, fileParallelism: false }));
