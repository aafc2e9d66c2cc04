import {
  aggregate,
  BackendError,
  type CursorBackend,
  type Invocation,
  type LeaseBackend,
  type LeaseGrant,
  type LeaseHolder,
  type Store,
} from '@duetime/core';

/** The stream every calendar run of the suite is recorded in (one event per completed run). */
export const CALENDAR_RUNS = 'conformance-calendar-runs';

/** Counts completed calendar runs; the events carry the occurrence id, the instant and the process id. */
export const calendarRuns = aggregate({
  type: 'conformance-calendar-runs',
  initial: 0,
  apply: { 'calendar.ran': (count: number) => count + 1 },
});

/** One durable run record. */
export interface RunEvent {
  occurrence: string;
  at: number;
  pid: number;
  runner: string;
}

/** Records that `invocation` ran (durably, in the backend's own store). */
export async function recordRun(
  store: Store<unknown>,
  invocation: Invocation,
  runner: string,
): Promise<void> {
  await store.transact(
    (tx) =>
      tx.exec(calendarRuns, CALENDAR_RUNS, (_count, ag) =>
        ag.raise('calendar.ran', {
          occurrence: invocation.occurrence,
          at: invocation.intendedAt.getTime(),
          pid: process.pid,
          runner,
        } satisfies RunEvent),
      ),
    { maxRetries: 50 },
  );
}

/** Every durable run record, in the order they committed. */
export async function loadRuns(store: Store<unknown>): Promise<RunEvent[]> {
  return (await store.loadEvents(CALENDAR_RUNS)).map((e) => e.data as RunEvent);
}

/**
 * Checks the two promises of failover over a run log: no occurrence ran twice, and no occurrence between
 * the first and the last run was left out (every `every` ms). Returns a description of what is wrong, or
 * `undefined` when both hold.
 */
export function gapsAndDuplicates(runs: RunEvent[], every: number): string | undefined {
  const seen = new Map<string, number>();
  for (const run of runs) seen.set(run.occurrence, (seen.get(run.occurrence) ?? 0) + 1);
  const twice = [...seen].filter(([, n]) => n > 1);
  if (twice.length > 0)
    return `occurrences ran more than once: ${twice.map(([id, n]) => `${id} ×${n}`).join(', ')}`;
  const instants = [...new Set(runs.map((r) => r.at))].sort((a, b) => a - b);
  const gaps: string[] = [];
  for (let i = 1; i < instants.length; i++) {
    const step = (instants[i] as number) - (instants[i - 1] as number);
    if (step !== every)
      gaps.push(
        `${new Date(instants[i - 1] as number).toISOString()} → ${new Date(instants[i] as number).toISOString()}`,
      );
  }
  if (gaps.length > 0) return `occurrences were skipped between: ${gaps.join(', ')}`;
  return undefined;
}

/**
 * A lease and cursor backend in front of a real one that can be cut off: while `partitioned` says so
 * for a call, the call fails with a transient {@link BackendError}, as when the network to the backend
 * is down. Stands in for a crashed or isolated process inside one process.
 */
export class Partition implements LeaseBackend, CursorBackend {
  #cut: ((key: string) => boolean) | undefined;

  constructor(
    readonly leases: LeaseBackend,
    readonly cursors: CursorBackend,
  ) {}

  /** Cuts off every call (or the calls on keys `matching` accepts). */
  cut(matching: (key: string) => boolean = () => true): void {
    this.#cut = matching;
  }

  heal(): void {
    this.#cut = undefined;
  }

  #check(operation: string, key: string): void {
    if (this.#cut?.(key))
      throw new BackendError(operation, 'backend unreachable (partitioned by the test)', { transient: true });
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    this.#check('lease acquire', key);
    return this.leases.acquire(key, owner, ttlMs);
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    this.#check('lease renew', key);
    return this.leases.renew(key, owner, token, ttlMs);
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    this.#check('lease release', key);
    return this.leases.release(key, owner, token);
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    this.#check('lease holder', key);
    return this.leases.holder(key);
  }

  async read(key: string): Promise<Date | undefined> {
    this.#check('cursor read', key);
    return this.cursors.read(key);
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    this.#check('cursor advance', key);
    return this.cursors.advance(key, at, ttlMs);
  }
}

/** Whether a lease key is a calendar group's leadership lease. */
export function isLeaderKey(key: string): boolean {
  return key.endsWith('/leader');
}
