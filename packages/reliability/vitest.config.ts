import { defineConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.js';

// One file at a time: every file starts processes or servers of its own, and the machine has 2 cores.
// The full run (DUETIME_CHAOS=full) passes a million schedules through one test: its deadline is an hour.
const full = process.env.DUETIME_CHAOS === 'full';
export default defineConfig(
  shared({ testTimeout: full ? 3_600_000 : 600_000, hookTimeout: 120_000, fileParallelism: false }),
);
