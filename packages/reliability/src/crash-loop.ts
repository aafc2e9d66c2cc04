import { waitFor } from '@duetime/conformance';
import type { Backend } from '@duetime/core';
import { ScheduleDriver } from './driver.js';
import { spawnWorker, type Worker } from './processes.js';
import type { Random } from './random.js';
import { CHAOS_CURSOR_KEY } from './roles.js';
import type { TargetSpec } from './targets.js';

export interface CrashLoopOptions {
  backend: Backend;
  target: TargetSpec;
  random: Random;
  kills: number;
  workers: number;
  /** The scheduler's `every` period in the workers (ms). */
  period: number;
  /** Per-step log (progress lines). */
  log?: (line: string) => void;
  /** Longest wait for a worker to come up, in ms (default 60,000). */
  startTimeoutMs?: number;
  /**
   * Runs beside the kills once the first workers are ready (faults of the server, say); the loop keeps
   * killing workers until both it and the kills are done.
   */
  alongside?: () => Promise<void>;
}

export interface CrashLoopResult {
  driver: ScheduleDriver;
  kills: number;
  /** Kills that hit a worker while it was the scheduler's leader. */
  leaderKills: number;
  spawned: number;
  startedAt: number;
  /** Exit codes of the workers stopped gracefully at the end (all 0 when they drained cleanly). */
  exitCodes: (number | null)[];
  /** Starts, kills, leadership changes and unsuccessful scheduler records, in time order (for failures). */
  timeline(): string[];
  /** Instants of the occurrences the workers' schedulers recorded as failed or skipped. */
  reported(): number[];
  /** Every worker's stderr lines (the last few thousand characters of each) that mention `text`. */
  mentions(text: string): string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `workers` worker processes (dispatcher and scheduler) while the driver adds, replaces and cancels
 * schedules, and SIGKILLs a random ready worker at a random moment, `kills` times, starting a new one
 * after each kill. Then stops the driver and the surviving workers (SIGTERM: they drain). A worker that
 * dies by itself fails the run, with its standard error.
 */
export async function runCrashLoop(options: CrashLoopOptions): Promise<CrashLoopResult> {
  const { random, target } = options;
  const log = options.log ?? (() => {});
  const startTimeout = options.startTimeoutMs ?? 60_000;
  const startedAt = Date.now();
  const driver = new ScheduleDriver({ store: options.backend.store, random: random.fork('driver') });
  const stopDriver = new AbortController();
  const driving = driver.run(stopDriver.signal, 12);
  const killed = new Set<Worker>();
  const events: { at: number; text: string }[] = [];
  const everyWorker: Worker[] = [];
  let spawned = 0;
  const start = async () => {
    spawned++;
    const worker = await spawnWorker('chaos', {
      target,
      seed: random.int(0, 0xffffffff),
      period: options.period,
      leadershipTTL: 1500,
    });
    events.push({ at: Date.now(), text: `spawned ${worker.pid}` });
    everyWorker.push(worker);
    return worker;
  };
  const workers: Worker[] = [];
  let kills = 0;
  let leaderKills = 0;
  let sideDone = options.alongside === undefined;
  let side: Promise<void> | undefined;
  try {
    for (let i = 0; i < options.workers; i++) workers.push(await start());
    if (options.alongside) {
      await Promise.all(workers.map((w) => w.line(/^READY$/, startTimeout)));
      side = options.alongside().finally(() => {
        sideDone = true;
      });
      side.catch(() => {});
    }
    while (kills < options.kills || !sideDone) {
      const crashed = workers.find((w) => !w.alive() && !killed.has(w));
      if (crashed)
        throw new Error(
          `a worker exited by itself (code ${crashed.child.exitCode}); stderr: ${crashed.stderr()}`,
        );
      const ready = workers.filter((w) => w.lines.includes('READY'));
      if (ready.length === 0) {
        await Promise.race(workers.map((w) => w.line(/^READY$/, startTimeout)));
        continue;
      }
      await sleep(random.int(20, 300));
      const victim = random.pick(ready);
      const wasLeader = isLeader(victim);
      killed.add(victim);
      events.push({ at: Date.now(), text: `SIGKILL ${victim.pid}${wasLeader ? ' (leader)' : ''}` });
      await victim.kill();
      kills++;
      if (wasLeader) leaderKills++;
      workers[workers.indexOf(victim)] = await start();
      if (kills % 10 === 0)
        log(`${kills} kills (${leaderKills} of a leader), ${driver.stats.transactions} transactions`);
    }
    await side;
    log(`${kills} kills in ${Date.now() - startedAt} ms; waiting for the last leader to catch up`);
    // Let the last generation come up and catch up: the calendar's cursor must reach the present before
    // the workers are stopped, or the occurrences still waiting for a slot would be cancelled by the drain
    // and, with nobody leading afterwards, never run.
    // The leader must be one of the workers alive now: a leader killed just after it took over may have
    // carried the cursor close to the present and died with later occurrences still running, which only
    // a live leader runs again (it takes over once the dead one's lease lapses).
    await Promise.all(workers.map((w) => w.line(/^READY$/, startTimeout)));
    await waitFor(
      'a live worker to lead and catch up with the calendar',
      async () => {
        if (!workers.some((w) => w.alive() && isLeader(w))) return false;
        const cursor = await options.backend.cursors.read(CHAOS_CURSOR_KEY);
        return cursor !== undefined && cursor.getTime() >= Date.now() - 2000 - options.period;
      },
      { timeoutMs: 120_000, intervalMs: 100 },
    );
  } catch (error) {
    stopDriver.abort();
    await side?.catch(() => {});
    await driving.catch(() => {});
    await Promise.allSettled(workers.map((w) => w.kill()));
    throw error;
  }
  stopDriver.abort();
  await driving;
  log(`caught up at ${Date.now() - startedAt} ms; stopping the workers`);
  const exitCodes = await Promise.all(workers.map((w) => w.stop(30_000)));
  for (const [i, code] of exitCodes.entries())
    if (code !== 0)
      log(`worker ${workers[i]?.pid} exited with ${code} on SIGTERM; stderr: ${workers[i]?.stderr()}`);
  const timeline = () => {
    const all = [...events];
    for (const w of everyWorker)
      for (const line of w.lines) {
        const at = Number(line.split(' ').at(-1));
        if (/^(LEADER|FOLLOWER|RECORD) /.test(line) && Number.isFinite(at))
          all.push({ at, text: `${w.pid} ${line}` });
      }
    return all.sort((a, b) => a.at - b.at).map((e) => `${new Date(e.at).toISOString()} ${e.text}`);
  };
  const reported = () =>
    everyWorker.flatMap((w) =>
      w.lines
        .filter((line) => /^RECORD (failed|skipped)\//.test(line))
        .map((line) => Number(line.split(' ')[2])),
    );
  const mentions = (text: string) =>
    everyWorker.flatMap((w) =>
      w
        .stderr()
        .split('\n')
        .filter((line) => line.includes(text))
        .map((line) => `${w.pid} ${line}`),
    );
  return { driver, kills, leaderKills, spawned, startedAt, exitCodes, timeline, reported, mentions };
}

/** Whether the worker's last leadership line says it leads. */
function isLeader(worker: Worker): boolean {
  for (let i = worker.lines.length - 1; i >= 0; i--) {
    const line = worker.lines[i] as string;
    if (line.startsWith('LEADER ')) return true;
    if (line.startsWith('FOLLOWER ')) return false;
  }
  return false;
}
