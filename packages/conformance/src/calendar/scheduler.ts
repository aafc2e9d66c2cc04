import {
  type Backend,
  type Declaration,
  every,
  Registry,
  Scheduler,
  type SchedulerConfig,
} from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { gapsAndDuplicates, isLeaderKey, loadRuns, Partition, recordRun } from './fixtures.js';

const EVERY = 300;
const TTL = 1000;
const POLL = 100;
/**
 * For tests about steady leadership: a leadership that outlasts a slow renewal on a loaded machine
 * (no other holder delays the first acquisition). A leader that lost its lease and took it again would
 * rightly re-run what its cursor had not recorded yet (at-least-once at the edges, core README), which is
 * not what these tests are about; the failover tests keep the short TTL.
 */
const STEADY = { leadershipTTL: 4 * TTL };

/**
 * The calendar scheduler on this backend, replicas inside one process: one leader, failover with
 * catch-up and no repeats, overlap leases that outlive leadership, cursors that survive a restart. Real
 * time, short TTLs, generous deadlines.
 */
export function calendarTests({ harness }: SuiteContext): void {
  /** A scheduler on its own instance of `namespace`'s data, with leases and cursors behind a partition. */
  const replica = async (
    namespace: string,
    declarations: Declaration[],
    config: Partial<SchedulerConfig> = {},
  ) => {
    const backend = await harness().open(namespace);
    const partition = new Partition(backend.leases, backend.cursors);
    const scheduler = new Scheduler({
      registry: new Registry(...declarations),
      leases: partition,
      cursors: partition,
      group: 'conformance',
      leadershipTTL: TTL,
      pollInterval: POLL,
      grace: 500,
      drainTimeout: 5000,
      ...config,
    });
    const done = scheduler.run();
    harness().defer(async () => {
      await scheduler.stop();
      await done;
    });
    return { backend, partition, scheduler };
  };

  /** A declaration whose handler records each run durably in `backend`'s store. */
  const recorded = (backend: Backend, runner: string) =>
    every('tick', EVERY, async ({ invocation }) => recordRun(backend.store, invocation, runner));

  it('elects exactly one leader among three replicas and runs each occurrence once', async () => {
    const { namespace, store } = await harness().open();
    const replicas = await Promise.all(
      ['a', 'b', 'c'].map(async (name) => {
        const backend = await harness().open(namespace);
        return replica(namespace, [recorded(backend, name)], STEADY);
      }),
    );
    const deadline = Date.now() + 2500;
    let maxLeaders = 0;
    while (Date.now() < deadline) {
      maxLeaders = Math.max(maxLeaders, replicas.filter((r) => r.scheduler.snapshot().leader).length);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(maxLeaders).toBe(1);
    await waitFor('a few occurrences to run', async () => (await loadRuns(store)).length >= 4);
    await Promise.all(replicas.map((r) => r.scheduler.drain()));
    const runs = await loadRuns(store);
    expect(new Set(runs.map((r) => r.runner)).size).toBe(1);
    expect(gapsAndDuplicates(runs, EVERY)).toBeUndefined();
  }, 60_000);

  it('runs nothing that was due before a new deployment started, then every occurrence once', async () => {
    const { namespace, store } = await harness().open();
    const backend = await harness().open(namespace);
    const before = Date.now();
    const { scheduler } = await replica(namespace, [recorded(backend, 'fresh')], { ...STEADY, grace: 5000 });
    await waitFor('three runs', async () => (await loadRuns(store)).length >= 3);
    await scheduler.drain();
    const runs = await loadRuns(store);
    // With 5 s of grace and no cursor, the old first start ran the last 5 s of occurrences at once.
    expect(Math.min(...runs.map((r) => r.at))).toBeGreaterThanOrEqual(before);
    expect(gapsAndDuplicates(runs, EVERY)).toBeUndefined();
  }, 60_000);

  it('fails over when the leader goes silent: another leads, missed occurrences are caught up once', async () => {
    const { namespace, store } = await harness().open();
    const catchUp = { window: 60_000, max: 1000 };
    const a = await replica(namespace, [recorded(await harness().open(namespace), 'a').with({ catchUp })]);
    await waitFor('a to lead', () => a.scheduler.snapshot().leader);
    const b = await replica(namespace, [recorded(await harness().open(namespace), 'b').with({ catchUp })]);
    // Wait for a quiet moment (nothing running, the cursor covering every recorded run), then cut `a`
    // off from the backend and abandon it: the in-process stand-in for a crash.
    await waitFor('a quiet moment on the leader after three runs', async () => {
      const runs = await loadRuns(store);
      const snapshot = a.scheduler.snapshot();
      const cursor = snapshot.schedules[0]?.cursor?.getTime() ?? 0;
      const latest = Math.max(...runs.map((r) => r.at));
      if (runs.length < 3 || snapshot.running > 0 || cursor < latest) return false;
      a.partition.cut();
      void a.scheduler.stop();
      return true;
    });
    const cutAt = Date.now();
    await waitFor('b to lead', () => b.scheduler.snapshot().leader, { timeoutMs: 30_000 });
    const takeover = Date.now() - cutAt;
    await waitFor(
      'b to run occurrences after the failover',
      async () => (await loadRuns(store)).some((r) => r.runner === 'b' && r.at > cutAt + 3 * EVERY),
      { timeoutMs: 30_000 },
    );
    await b.scheduler.drain();
    const runs = await loadRuns(store);
    expect(gapsAndDuplicates(runs, EVERY), `takeover after ${takeover} ms`).toBeUndefined();
    // Occurrences that fell due while nobody led were run late by b, exactly once.
    expect(runs.some((r) => r.runner === 'b' && r.at < cutAt + TTL)).toBe(true);
  }, 90_000);

  it("keeps the old leader's overlap lease while its handler runs: the new leader records overlap_busy", async () => {
    const { namespace } = await harness().open();
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let startedOnA = false;
    const options = { withoutOverlap: true, overlapTTL: TTL };
    const a = await replica(namespace, [
      every('tick', EVERY, async () => {
        startedOnA = true;
        await released;
      }).with(options),
    ]);
    await waitFor('a handler to start on a', () => startedOnA);
    const b = await replica(namespace, [every('tick', EVERY, () => {}).with(options)]);
    // a loses leadership (its leader lease can no longer be renewed) but keeps running the handler.
    a.partition.cut(isLeaderKey);
    await waitFor('b to lead', () => b.scheduler.snapshot().leader, { timeoutMs: 30_000 });
    await waitFor('b to find the schedule busy', () =>
      b.scheduler.snapshot().history.some((r) => r.reason === 'overlap_busy'),
    );
    expect(a.scheduler.snapshot().history.find((r) => r.schedule === 'tick')).toMatchObject({
      state: 'cancelled',
      reason: 'leadership_lost',
    });
    expect(b.scheduler.snapshot().history.some((r) => r.state === 'succeeded')).toBe(false);
    release();
    await waitFor('b to run once the old handler ended', () =>
      b.scheduler.snapshot().history.some((r) => r.state === 'succeeded'),
    );
  }, 60_000);

  it("with onOverlap: 'queue', the new leader runs the occurrence that found the old leader's run going once it ends", async () => {
    const { namespace } = await harness().open();
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let startedOnA = false;
    const options = { withoutOverlap: true, onOverlap: 'queue' as const, overlapTTL: TTL };
    // A new epoch on b would rightly drop the occurrence queued in the old one (see STEADY).
    const a = await replica(
      namespace,
      [
        every('tick', EVERY, async () => {
          startedOnA = true;
          await released;
        }).with(options),
      ],
      STEADY,
    );
    await waitFor('a handler to start on a', () => startedOnA);
    const ranOnB: number[] = [];
    const b = await replica(
      namespace,
      [
        every('tick', EVERY, ({ invocation }) => void ranOnB.push(invocation.intendedAt.getTime())).with(
          options,
        ),
      ],
      STEADY,
    );
    a.partition.cut(isLeaderKey);
    await waitFor('b to lead', () => b.scheduler.snapshot().leader, { timeoutMs: 30_000 });
    await waitFor('an occurrence to queue on b', () => b.scheduler.snapshot().queued === 1);
    await waitFor('a later one to be skipped behind it', () =>
      b.scheduler.snapshot().history.some((r) => r.detail === 'a run is already queued'),
    );
    expect(ranOnB).toEqual([]);
    const releasedAt = Date.now();
    release();
    await waitFor('b to run the queued occurrence', () => ranOnB.length > 0, { timeoutMs: 30_000 });
    // It ran an occurrence due while the old handler still held the lease, not only later ones.
    expect(ranOnB[0]).toBeLessThan(releasedAt);
    const first = b.scheduler.snapshot().history.find((r) => r.state === 'succeeded');
    expect(first?.intendedAt.getTime()).toBe(ranOnB[0]);
  }, 60_000);

  it('resumes from the durable cursor after a restart, without re-running finished occurrences', async () => {
    const { namespace, store } = await harness().open();
    const catchUp = { window: 60_000, max: 1000 };
    const first = await replica(
      namespace,
      [recorded(await harness().open(namespace), 'first').with({ catchUp })],
      STEADY,
    );
    await waitFor('three runs', async () => (await loadRuns(store)).length >= 3);
    await first.scheduler.drain();
    await new Promise((resolve) => setTimeout(resolve, 3 * EVERY));
    // Drain released the first one's leadership: the second takes it at once, however long its TTL.
    const second = await replica(
      namespace,
      [recorded(await harness().open(namespace), 'second').with({ catchUp })],
      STEADY,
    );
    await waitFor('the restarted scheduler to run', async () =>
      (await loadRuns(store)).some((r) => r.runner === 'second'),
    );
    await waitFor(
      'a few more runs',
      async () => (await loadRuns(store)).filter((r) => r.runner === 'second').length >= 5,
    );
    await second.scheduler.drain();
    expect(gapsAndDuplicates(await loadRuns(store), EVERY)).toBeUndefined();
  }, 60_000);
}
