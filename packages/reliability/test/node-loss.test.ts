import { createRedisBackend } from '@duetime/backend-redis';
import { freshNamespace } from '@duetime/conformance';
import { occurrenceId } from '@duetime/core';
import {
  newerNatsServerBinary,
  PrivateNatsCluster,
  PrivateRedisCluster,
  PrivateRedisServer,
} from '@duetime/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuditFigures, audit, describeFigures } from '../src/audit.js';
import { collect, drainDue } from '../src/collect.js';
import { runCrashLoop } from '../src/crash-loop.js';
import { createEffectTable } from '../src/effects.js';
import { SIZES, selectedBackends } from '../src/mode.js';
import {
  crashServer,
  faultAround,
  loseMasters,
  loseStreamLeaders,
  type NodeFault,
} from '../src/node-loss.js';
import { OUTAGE_SCHEDULE, OUTAGE_SCOPE, runOutages } from '../src/outage-run.js';
import { natsLeaderInjector } from '../src/outages.js';
import { PrivatePostgresServer } from '../src/postgres-server.js';
import { Random, runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';
import { CHAOS_SCHEDULE, CHAOS_SCOPE } from '../src/roles.js';
import { BACKENDS, dropTarget, newTarget, openTarget, type TargetSpec } from '../src/targets.js';

// Node loss: the server under the store dies or hangs while work runs. Redis: a private Redis Cluster
// (three masters, one replica each, cluster-node-timeout 1 s) whose master serving the store is killed or
// frozen until its replica takes over, while workers are SIGKILLed. NATS: a private three-server
// JetStream cluster with the store's streams on all three (R3) whose server leading the store stream is
// SIGKILLed and started again, during a crash loop and during an outage run. PostgreSQL: a private server
// (every process of it) SIGKILLed and started again during a crash loop; no replica takes over, the
// server's write-ahead log brings back what it acknowledged.
const PERIOD = 250;
const selected = selectedBackends(BACKENDS);
const runs = selected.includes('redis') ? ['redis'] : [];

describe.runIf(runs.length > 0)('a Redis master lost during a crash loop', () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start({ masters: 3, replicas: 1, nodeTimeout: 1000 });
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  for (const replicated of [true, false]) {
    const name = replicated ? 'redis-cluster-wait' : 'redis-cluster';
    it(
      replicated
        ? `with waitForReplicas 1, loses ${SIZES.nodeFaults} masters: nothing acknowledged lost, nothing twice, nothing stuck`
        : `without waitForReplicas, loses ${SIZES.nodeFaults} masters: whatever is lost was acknowledged around a failover`,
      async () => {
        const seed = runSeed();
        const label = `[node loss ${name}]`;
        console.log(
          `${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=redis)`,
        );
        const target: TargetSpec = {
          kind: 'redis',
          url: cluster.urls[0] as string,
          prefix: `rel${freshNamespace()}`,
          cluster: cluster.urls,
          ...(replicated ? { waitForReplicas: { replicas: 1, timeoutMs: 1000 } } : {}),
        };
        const backend = await openTarget(target);
        const random = new Random(seed).fork(`node-loss:${name}`);
        let faults: NodeFault[] = [];
        try {
          const run = await runCrashLoop({
            backend,
            target,
            random,
            kills: SIZES.nodeLossKills,
            workers: 2,
            period: PERIOD,
            log: (line) => console.log(`${label} ${line}`),
            alongside: async () => {
              faults = await loseMasters({
                cluster,
                key: `{${target.prefix}}:schedules`,
                count: SIZES.nodeFaults,
                random: random.fork('faults'),
                log: (line) => console.log(`${label} ${line}`),
              });
            },
          });
          const figures = await auditCrashLoop(backend, target, run);
          const outside = figures.lostPuts.filter((put) => faultAround(put, faults) === undefined);
          const takeover = faults.map((f) => f.takenOverAt - f.at);
          console.log(
            describeFigures(label, figures, {
              'node faults': faults.length,
              kills: run.kills,
              transactions: run.driver.stats.transactions,
              'failed transactions': run.driver.stats.failedTransactions,
              'lost outside a failover': outside.length,
            }),
          );
          for (const put of figures.lostPuts) {
            const fault = faultAround(put, faults);
            console.log(
              `${label} lost: put ${put.put} of ${put.key}, acknowledged ${fault ? `${(put.doneAt ?? 0) - fault.at} ms after the ${fault.kind} of ${fault.port} (taken over at +${fault.takenOverAt - fault.at} ms, back at +${fault.backAt - fault.at} ms)` : 'away from every failover'}`,
            );
          }
          if (figures.problems.length > 0) console.log(`${label} problems:\n${figures.problems.join('\n')}`);
          recordResult('node-loss', name, seed, {
            nodeFaults: faults.length,
            kills: run.kills,
            schedules: figures.schedules,
            delivered: figures.delivered,
            uncertain: figures.uncertain,
            ticks: figures.ticks,
            ticksReportedFailed: figures.ticksReported,
            lost: figures.lost + figures.ticksLost,
            duplicated: figures.duplicated + figures.ticksDuplicated,
            stuck: figures.stuck,
            lostOutsideFailover: outside.length,
            takeoverMsMax: Math.max(0, ...takeover),
          });
          const problems = figures.problems.join('\n');
          if (figures.problems.length > 0) console.log(`${label} timeline:\n${run.timeline().join('\n')}`);
          expect(faults.length, 'masters lost').toBe(SIZES.nodeFaults);
          expect(run.exitCodes, 'workers drained and exited 0 on SIGTERM').toEqual(
            run.exitCodes.map(() => 0),
          );
          expect(figures.stuck, problems).toBe(0);
          expect(figures.unexpected, problems).toBe(0);
          expect(outside, 'puts lost away from every failover').toEqual([]);
          if (replicated) {
            expect(figures.lost, problems).toBe(0);
            expect(figures.duplicated, problems).toBe(0);
            expect(figures.ticksLost, problems).toBe(0);
            expect(figures.ticksDuplicated, problems).toBe(0);
          }
          // Work went on through the failovers.
          expect(figures.delivered).toBeGreaterThan(0);
          expect(figures.ticks).toBeGreaterThan(10);
        } finally {
          await backend.close();
          await dropTarget(target);
        }
      },
    );
  }
});

// A server that dies without a replica to take over comes back with what it persisted: the appendfsync
// setting decides what a crash of the Redis process loses (a power loss is not simulated here). With
// `everysec`, Redis answers writes it has not yet handed to the OS while a background fsync is still
// running, for up to 2 s (`flushAppendOnlyFile` postpones the write; the "Asynchronous AOF fsync is taking
// too long" notice is logged when it stops waiting): a SIGKILL then loses the last acknowledged writes. The
// AOF is written in command order, so what survives is every committer's commits up to a point.
const PERSISTENCE = [
  {
    name: 'AOF, appendfsync always',
    args: ['--appendonly', 'yes', '--appendfsync', 'always'],
    keeps: 'all',
    promise: 'keeps every acknowledged commit',
  },
  {
    name: 'AOF, appendfsync everysec',
    args: ['--appendonly', 'yes', '--appendfsync', 'everysec'],
    keeps: 'up to a point',
    promise: 'keeps commits up to a point, no gap',
  },
  { name: 'no persistence', args: [], keeps: 'none', promise: 'keeps no commit' },
] as const;

describe.runIf(runs.length > 0)('a single Redis server SIGKILLed under load and restarted', () => {
  it.each(PERSISTENCE)('$name: $promise, and fencing tokens still grow', async ({ name, args, keeps }) => {
    const server = await PrivateRedisServer.start({ serverArgs: [...args] });
    const backend = await createRedisBackend({ url: server.url }, { prefix: 'crash', commitTimeoutMs: 0 });
    try {
      const before = await backend.leases.acquire('lease', 'before', 60_000);
      // Each committer's acknowledged commits, in order.
      const acknowledged: string[][] = [];
      const stop = new AbortController();
      const committers = Array.from({ length: 8 }, async (_, c) => {
        const mine: string[] = [];
        acknowledged.push(mine);
        for (let i = 0; !stop.signal.aborted; i++) {
          const key = `c${c}/${i}`;
          try {
            await backend.store.transact((tx) =>
              tx.schedule(key, new Date(Date.now() + 3_600_000), { type: 'crash', aggregateId: key }),
            );
            if (!stop.signal.aborted) mine.push(key);
          } catch {
            return; // the server is gone: this committer stops
          }
        }
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const killedAt = acknowledged.flat().length;
      await server.kill();
      stop.abort();
      await Promise.all(committers);
      await server.restart();
      const survived = (await backend.store.listSchedules()).map((s) => s.key);
      const kept = new Set(survived);
      const all = acknowledged.flat();
      const lost = all.filter((key) => !kept.has(key));
      console.log(
        `[crash ${name}] ${all.length} commits acknowledged (${killedAt} before the kill was sent), ${lost.length} lost, ${survived.length} found after the restart`,
      );
      recordResult('server-crash', `redis ${name}`, 0, { acknowledged: all.length, lost: lost.length });
      expect(all.length).toBeGreaterThan(10);
      if (keeps === 'all') expect(lost).toEqual([]);
      else if (keeps === 'none') expect(survived).toEqual([]);
      else {
        // A committer's commits survive up to a point and none after it: no gap.
        const gaps = acknowledged.flatMap((mine) => {
          const firstLost = mine.findIndex((key) => !kept.has(key));
          return firstLost < 0 ? [] : mine.slice(firstLost).filter((key) => kept.has(key));
        });
        expect(gaps, 'commits kept after an earlier one of the same committer was lost').toEqual([]);
      }
      await backend.leases.release('lease', 'before', before!.token);
      const after = await backend.leases.acquire('lease', 'after', 60_000);
      expect(after!.token).toBeGreaterThan(before!.token);
    } finally {
      await backend.close();
      await server.stop();
    }
  });
});

/** Drains what a crash loop left due, then audits the whole run: every put, delivery and tick. */
async function auditCrashLoop(
  backend: Awaited<ReturnType<typeof openTarget>>,
  target: TargetSpec,
  run: Awaited<ReturnType<typeof runCrashLoop>>,
): Promise<AuditFigures> {
  const drainedAt = await drainDue(backend, target, {
    until: lastDeadline(run.driver.history.puts.values()) + 50,
    timeoutMs: 120_000,
  });
  const input = await collect(backend, target, run.driver.history, drainedAt, {
    scope: CHAOS_SCOPE,
    schedule: CHAOS_SCHEDULE,
    period: PERIOD,
    from: run.startedAt - 2000,
    to: drainedAt,
  });
  if (input.ticks)
    input.ticks.reported = new Set(run.reported().map((at) => occurrenceId(CHAOS_SCOPE, CHAOS_SCHEDULE, at)));
  return audit(input);
}

/** When the last put the driver made is due (the far-future ones left out): the final drain waits for it. */
function lastDeadline(puts: Iterable<{ at: number }>): number {
  return Math.max(0, ...[...puts].map((p) => p.at).filter((at) => at < Date.now() + 3_600_000));
}

/** The figures a NATS or PostgreSQL node-loss run records. */
function lossFigures(figures: AuditFigures, faults: NodeFault[], kills: number) {
  const takeover = faults.map((f) => f.takenOverAt - f.at);
  return {
    nodeFaults: faults.length,
    kills,
    schedules: figures.schedules,
    delivered: figures.delivered,
    uncertain: figures.uncertain,
    ticks: figures.ticks,
    ticksReportedFailed: figures.ticksReported,
    lost: figures.lost + figures.ticksLost,
    duplicated: figures.duplicated + figures.ticksDuplicated,
    stuck: figures.stuck,
    lostOutsideFailover: figures.lostPuts.filter((put) => faultAround(put, faults) === undefined).length,
    takeoverMsMin: Math.min(...takeover),
    takeoverMsMax: Math.max(0, ...takeover),
    wholeAgainMsMax: Math.max(0, ...faults.map((f) => f.healthyAt - f.at)),
  };
}

/**
 * What a NATS R3 store and a PostgreSQL server promise through the loss of a node: an acknowledged commit
 * is on a quorum (NATS) or in the write-ahead log on disk (PostgreSQL), so nothing is lost, doubled or stuck.
 */
function expectNothingLost(
  figures: AuditFigures,
  faults: NodeFault[],
  label: string,
  context: readonly string[] = [],
): void {
  // The faults' times, the lost puts' acknowledgements and whatever the caller adds travel with the
  // assertion, so a failure's message places each loss against the faults.
  const problems = [
    ...figures.problems,
    ...faults.map(
      (f) =>
        `fault: ${f.kind} of ${f.port} at ${new Date(f.at).toISOString()}, new leader +${f.takenOverAt - f.at} ms, back +${f.backAt - f.at} ms, whole +${f.healthyAt - f.at} ms${f.restartedBeforeTakeover ? ' (restarted before the takeover)' : ''}`,
    ),
    ...figures.lostPuts.map(
      (put) => `lost: ${put.put} of ${put.key} acknowledged at ${new Date(put.doneAt ?? 0).toISOString()}`,
    ),
    ...context,
  ].join('\n');
  if (figures.problems.length > 0) console.log(`${label} problems:\n${problems}`);
  expect(figures.lost, problems).toBe(0);
  expect(figures.duplicated, problems).toBe(0);
  expect(figures.stuck, problems).toBe(0);
  expect(figures.unexpected, problems).toBe(0);
  expect(figures.ticksLost, problems).toBe(0);
  expect(figures.ticksDuplicated, problems).toBe(0);
  // Work went on through the losses.
  expect(figures.delivered).toBeGreaterThan(0);
  expect(figures.ticks).toBeGreaterThan(10);
}

/**
 * Each server's own copy of the store stream, once quiet: copies that still differ after a loss show a
 * replica out of step with the others (reads it serves miss what the others hold).
 */
async function replicaLines(cluster: PrivateNatsCluster, stream: string): Promise<string[]> {
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const states = await cluster.replicaStates(stream).catch((error: unknown) => String(error));
  if (typeof states === 'string') return [`replicas: could not be read (${states})`];
  return states.map(
    (r) =>
      `replica on ${r.port}: ${r.messages} messages, sequences ${r.firstSeq}–${r.lastSeq}, ${r.deleted} deleted`,
  );
}

describe.runIf(selected.includes('nats'))('a NATS stream leader lost (three servers, R3 streams)', () => {
  let cluster: PrivateNatsCluster;
  beforeAll(async () => {
    // The store needs NATS >= 2.12: the binary `bash scripts/services.sh up` fetches (or
    // DUETIME_NATS_SERVER_BIN); without it this fails naming the command.
    cluster = await PrivateNatsCluster.start({ binary: newerNatsServerBinary(), syncInterval: 'always' });
  }, 120_000);
  afterAll(async () => {
    await cluster?.dispose();
  });

  const targetOn = (c: PrivateNatsCluster): Extract<TargetSpec, { kind: 'nats' }> => ({
    kind: 'nats',
    url: c.urls[0] as string,
    cluster: c.urls,
    prefix: `rel${freshNamespace()}`,
    replicas: 3,
  });

  it(`during a crash loop, SIGKILLs the store stream's leader ${SIZES.nodeFaults} times: nothing lost, nothing twice, nothing stuck`, async () => {
    const seed = runSeed();
    const label = '[node loss nats-cluster]';
    console.log(`${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=nats)`);
    const target = targetOn(cluster);
    const stream = `${target.prefix}_store`;
    const backend = await openTarget(target);
    const random = new Random(seed).fork('node-loss:nats-cluster');
    let faults: NodeFault[] = [];
    try {
      const run = await runCrashLoop({
        backend,
        target,
        random,
        kills: SIZES.nodeLossKills,
        workers: 2,
        period: PERIOD,
        log: (line) => console.log(`${label} ${line}`),
        alongside: async () => {
          faults = await loseStreamLeaders({
            cluster,
            stream,
            streams: [stream, `${target.prefix}_lease`],
            count: SIZES.nodeFaults,
            random: random.fork('faults'),
            log: (line) => console.log(`${label} ${line}`),
          });
        },
      });
      const figures = await auditCrashLoop(backend, target, run);
      const recorded = lossFigures(figures, faults, run.kills);
      console.log(
        describeFigures(label, figures, {
          'leaders lost': faults.length,
          kills: run.kills,
          transactions: run.driver.stats.transactions,
          'failed transactions': run.driver.stats.failedTransactions,
          'new leader after (ms)': `${recorded.takeoverMsMin}–${recorded.takeoverMsMax}`,
        }),
      );
      recordResult('node-loss', 'nats-cluster', seed, recorded);
      if (figures.problems.length > 0) console.log(`${label} timeline:\n${run.timeline().join('\n')}`);
      expect(faults.length, 'stream leaders lost').toBe(SIZES.nodeFaults);
      expect(run.exitCodes, 'workers drained and exited 0 on SIGTERM').toEqual(run.exitCodes.map(() => 0));
      const replicas = figures.lost > 0 ? await replicaLines(cluster, stream) : [];
      expectNothingLost(figures, faults, label, replicas);
    } finally {
      await backend.close();
      await dropTarget(target).catch(() => {});
    }
  });

  it(`during an outage run, SIGKILLs the store stream's leader ${SIZES.nodeFaults} times: nothing lost, nothing twice, every error typed`, async () => {
    const seed = runSeed();
    const label = '[node loss nats-cluster outages]';
    console.log(`${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=nats)`);
    const target = targetOn(cluster);
    const faults: NodeFault[] = [];
    const injector = natsLeaderInjector(target, cluster, faults);
    const direct = await openTarget(target);
    try {
      const run = await runOutages({
        injector,
        random: new Random(seed).fork('node-loss:nats-cluster-outages'),
        outages: SIZES.nodeFaults,
        period: PERIOD,
        log: (line) => console.log(`${label} ${new Date().toISOString()} ${line}`),
      });
      const drainedAt = await drainDue(direct, target, {
        until: lastDeadline(run.driver.history.puts.values()) + 50,
        timeoutMs: 120_000,
      });
      const input = await collect(direct, target, run.driver.history, drainedAt, {
        scope: OUTAGE_SCOPE,
        schedule: OUTAGE_SCHEDULE,
        period: PERIOD,
        from: run.startedAt - 2000,
        to: drainedAt,
      });
      if (input.ticks) input.ticks.reported = run.reported;
      const figures = audit(input);
      const recorded = lossFigures(figures, faults, 0);
      console.log(
        describeFigures(label, figures, {
          'leaders lost': faults.length,
          leaderships: run.leaderships,
          'failed transactions': run.driver.stats.failedTransactions,
          'new leader after (ms)': `${recorded.takeoverMsMin}–${recorded.takeoverMsMax}`,
        }),
      );
      console.log(`${label} errors reported ${JSON.stringify(Object.fromEntries(run.errors.byCode))}`);
      recordResult('node-loss', 'nats-cluster-outages', seed, {
        ...recorded,
        untypedErrors: run.errors.untypedCount,
      });
      expect(run.total).toBe(SIZES.nodeFaults);
      expect(faults.length, 'stream leaders lost').toBe(SIZES.nodeFaults);
      expect(run.errors.untyped, 'errors that are not DuetimeErrors').toEqual([]);
      expect(figures.torn).toBe(0);
      expectNothingLost(figures, faults, label);
    } finally {
      await direct.close();
      await dropTarget(target).catch(() => {});
    }
  });
});

describe.runIf(selected.includes('postgres'))('a PostgreSQL server crashed during a crash loop', () => {
  let server: PrivatePostgresServer;
  beforeAll(async () => {
    server = await PrivatePostgresServer.start();
  }, 120_000);
  afterAll(async () => {
    await server?.dispose();
  });

  it(`SIGKILLs every server process ${SIZES.nodeFaults} times and starts it again: nothing lost, nothing twice, nothing stuck`, async () => {
    const seed = runSeed();
    const label = '[node loss postgres]';
    console.log(`${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=postgres)`);
    const target = newTarget('postgres', freshNamespace(), server.url);
    const backend = await openTarget(target);
    const random = new Random(seed).fork('node-loss:postgres');
    let faults: NodeFault[] = [];
    try {
      await createEffectTable(backend.store, target);
      const run = await runCrashLoop({
        backend,
        target,
        random,
        kills: SIZES.nodeLossKills,
        workers: 2,
        period: PERIOD,
        log: (line) => console.log(`${label} ${line}`),
        alongside: async () => {
          faults = await crashServer({
            server,
            count: SIZES.nodeFaults,
            random: random.fork('faults'),
            log: (line) => console.log(`${label} ${line}`),
          });
        },
      });
      const figures = await auditCrashLoop(backend, target, run);
      const recorded = lossFigures(figures, faults, run.kills);
      console.log(
        describeFigures(label, figures, {
          'server crashes': faults.length,
          kills: run.kills,
          transactions: run.driver.stats.transactions,
          'failed transactions': run.driver.stats.failedTransactions,
          'serving again after (ms)': `${recorded.takeoverMsMin}–${recorded.takeoverMsMax}`,
        }),
      );
      recordResult('node-loss', 'postgres', seed, recorded);
      if (figures.problems.length > 0) console.log(`${label} timeline:\n${run.timeline().join('\n')}`);
      expect(faults.length, 'server crashes').toBe(SIZES.nodeFaults);
      expect(run.exitCodes, 'workers drained and exited 0 on SIGTERM').toEqual(run.exitCodes.map(() => 0));
      expect(figures.torn, figures.problems.join('\n')).toBe(0);
      expectNothingLost(figures, faults, label);
    } finally {
      await backend.close();
      await dropTarget(target).catch(() => {});
    }
  });
});
