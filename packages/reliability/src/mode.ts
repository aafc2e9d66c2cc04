import type { BackendName } from './targets.js';

/**
 * Two sizes of the same suite: `ci` (what `pnpm test` runs: bounded, a few minutes for every backend on
 * a loaded 2-core machine) and `full` (`pnpm test:chaos`, `DUETIME_CHAOS=full`). Every figure can be
 * overridden through its own variable to reproduce or stretch a run.
 */
export const FULL = process.env.DUETIME_CHAOS === 'full';
export const MODE = FULL ? 'full' : 'ci';

function figure(variable: string, ci: number, full: number): number {
  const given = process.env[variable];
  if (given === undefined || given === '') return FULL ? full : ci;
  const value = Number(given);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${variable} must be a non-negative number`);
  return value;
}

export const SIZES = {
  /** SIGKILLs per backend in the crash loop. */
  kills: figure('DUETIME_CHAOS_KILLS', 20, 200),
  /** Worker processes running at once in the crash loop. */
  workers: figure('DUETIME_CHAOS_WORKERS', 3, 3),
  /**
   * Nodes lost in a node-loss run: Redis masters killed or frozen (each time the one serving the store),
   * NATS stream leaders killed, PostgreSQL servers crashed.
   */
  nodeFaults: figure('DUETIME_CHAOS_NODE_FAULTS', 2, 12),
  /** Worker SIGKILLs during a node-loss run (at least until its node faults are done). */
  nodeLossKills: figure('DUETIME_CHAOS_NODE_LOSS_KILLS', 4, 60),
  /** Faults injected per backend in the outage run. */
  outages: figure('DUETIME_CHAOS_OUTAGES', 6, 60),
  /**
   * NATS outage runs in the outage loop (half of them with the CPU saturated by busy-looping processes);
   * none in the CI form.
   */
  outageLoop: figure('DUETIME_CHAOS_OUTAGE_LOOP', 0, 50),
  /** Faults injected per run of the outage loop. */
  outageLoopFaults: figure('DUETIME_CHAOS_OUTAGE_LOOP_FAULTS', 6, 10),
  /** Longest fault (blackhole, latency, server down, lock held) in the outage run, in ms. */
  faultMs: figure('DUETIME_CHAOS_FAULT_MS', 2500, 4000),
  /** fast-check runs per property (store properties run a fifth of it against real servers). */
  fuzzRuns: figure('DUETIME_CHAOS_FUZZ_RUNS', 300, 3000),
  /** Schedules through the soak on SQLite, and on the other backends. */
  soakSqlite: figure('DUETIME_CHAOS_SOAK_SQLITE', 10_000, 1_000_000),
  soakOthers: figure('DUETIME_CHAOS_SOAK_OTHERS', 2_000, 100_000),
} as const;

/** The backends to run on: all four, or those listed in `DUETIME_CHAOS_BACKENDS` (comma-separated). */
export function selectedBackends(all: readonly BackendName[]): BackendName[] {
  const given = process.env.DUETIME_CHAOS_BACKENDS;
  if (!given) return [...all];
  const wanted = given.split(',').map((s) => s.trim());
  for (const name of wanted)
    if (!all.includes(name as BackendName))
      throw new Error(`DUETIME_CHAOS_BACKENDS names ${JSON.stringify(name)}; known: ${all.join(', ')}`);
  return all.filter((b) => wanted.includes(b));
}
