import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** A full garbage collection (exposed once through V8's flags, so heap samples are comparable). */
export function collectGarbage(): void {
  gc ??= exposeGc();
  gc();
}

let gc: (() => void) | undefined;
function exposeGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** One look at the process: memory after a full collection, and open handles by kind. */
export interface ResourceSample {
  /** Schedules through so far. */
  at: number;
  rss: number;
  heapUsed: number;
  handles: Record<string, number>;
}

/** Open handles and requests by kind (`TCPSocketWrap`, `Timeout`, `FSReqCallback`, …). */
export function handleCounts(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}

/** Listener counts on `process` by event (signals, exit, warnings…). */
export function processListeners(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const name of process.eventNames()) counts[String(name)] = process.listenerCount(name);
  return counts;
}

export function sample(at: number): ResourceSample {
  collectGarbage();
  const memory = process.memoryUsage();
  return { at, rss: memory.rss, heapUsed: memory.heapUsed, handles: handleCounts() };
}

/** Kinds whose count in `now` exceeds `before` (the leftovers), as `kind +n`. */
export function excess(before: Record<string, number>, now: Record<string, number>): string[] {
  return Object.entries(now)
    .filter(([kind, n]) => n > (before[kind] ?? 0))
    .map(([kind, n]) => `${kind} +${n - (before[kind] ?? 0)}`);
}

export const MB = 1024 * 1024;
