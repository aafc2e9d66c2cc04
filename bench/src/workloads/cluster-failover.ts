import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@duetime/core';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext, sleep, until } from '../lib/run.js';
import { uniqueName } from '../subjects/types.js';
import { DEFAULTS, firstLeader, type Leadership, QUICK, type Replica, replica } from './failover.js';
import { CLUSTER_OPTIONS } from './scaleout.js';

/** The clusters this workload runs on (subjects `duetime/<target>`, as in scaleout). */
export type ClusterTarget = 'redis-cluster' | 'nats-cluster';
export const CLUSTER_TARGETS: ClusterTarget[] = ['redis-cluster', 'nats-cluster'];

/**
 * `cluster-node-timeout` of the workload's Redis Cluster: that of the shared cluster
 * `scripts/services.sh up --clusters` starts (Redis's own default is 15 s).
 */
export const REDIS_NODE_TIMEOUT = 5000;

/** The calendar's period in the replicas (failover.ts's declaration runs every second). */
const PERIOD = 1000;

/**
 * Opens duetime's backend on every node of a cluster, every setting at its default: Redis through an
 * ioredis `Cluster` with the settings backend-redis's README gives for failovers; NATS with the store's
 * streams on three servers (`replicas: 3`). Closing the backend closes the client too.
 */
export async function openOnCluster(
  cluster: { target: ClusterTarget; urls: string[] },
  namespace: string,
): Promise<Backend> {
  if (cluster.target === 'nats-cluster') {
    const { createNatsBackend } = await import('@duetime/backend-nats');
    return createNatsBackend({ servers: cluster.urls }, { prefix: namespace, replicas: 3 });
  }
  const { createRedisBackend } = await import('@duetime/backend-redis');
  const { Cluster } = await import('ioredis');
  const client = new Cluster(
    cluster.urls.map((url) => ({ host: '127.0.0.1', port: Number(new URL(url).port) })),
    CLUSTER_OPTIONS,
  );
  client.on('error', () => {});
  try {
    const backend = await createRedisBackend({ client }, { prefix: namespace });
    const close = backend.close.bind(backend);
    return Object.assign(backend, {
      async close() {
        await close();
        client.disconnect();
      },
    });
  } catch (error) {
    client.disconnect();
    throw error;
  }
}

/**
 * A nats-server >= 2.12 for the workload's own cluster: DUETIME_NATS_SERVER_BIN, else the one
 * `bash scripts/services.sh up` fetched into its cache.
 */
function natsServerBinary(): string {
  const given = process.env.DUETIME_NATS_SERVER_BIN;
  if (given) return given;
  const cache =
    process.env.DUETIME_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'duetime');
  const fetched = join(cache, 'nats-new', 'root', 'usr', 'sbin', 'nats-server');
  if (existsSync(fetched)) return fetched;
  throw new Error(
    `no nats-server >= 2.12 at ${fetched}; run 'bash scripts/services.sh up' to fetch it, or set DUETIME_NATS_SERVER_BIN`,
  );
}

/** A cluster of the workload's own, seen through what the measurement needs of it. */
interface OwnCluster {
  urls: string[];
  /** The client port of the server holding the lease of store `namespace`. */
  holder(namespace: string): Promise<number>;
  kill(port: number): Promise<void>;
  /** Waits until a server other than `port` serves the lease of store `namespace`. */
  waitTakenOver(namespace: string, port: number): Promise<void>;
  restart(port: number): Promise<void>;
  /** Waits until every server runs and the store `namespace` is replicated in full again. */
  waitHealthy(namespace: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts a cluster of the workload's own (never the shared one: its servers get killed): a Redis
 * Cluster of 3 masters with 1 replica each, or a NATS cluster of 3 servers with JetStream, on free
 * loopback ports, from the binaries `scripts/services.sh up` provides.
 */
async function startCluster(target: ClusterTarget): Promise<OwnCluster> {
  if (target === 'redis-cluster') {
    const { PrivateRedisCluster } = await import('@duetime/testing');
    const cluster = await PrivateRedisCluster.start({
      masters: 3,
      replicas: 1,
      nodeTimeout: REDIS_NODE_TIMEOUT,
    });
    // Every key of a store shares its hash tag, so the master of any of them holds the lease.
    const key = (namespace: string) => `{${namespace}}:lease`;
    return {
      urls: cluster.urls,
      holder: (namespace) => cluster.masterOf(key(namespace)),
      kill: (port) => cluster.kill(port),
      async waitTakenOver(namespace, port) {
        await cluster.waitTakenOver(key(namespace), port);
      },
      async restart(port) {
        cluster.restart(port);
      },
      waitHealthy: () => cluster.waitHealthy(),
      stop: () => cluster.stop(),
    };
  }
  const { PrivateNatsCluster } = await import('@duetime/testing');
  const cluster = await PrivateNatsCluster.start({ binary: natsServerBinary() });
  return {
    urls: cluster.urls,
    holder: (namespace) => cluster.waitStreamLeader(`${namespace}_lease`),
    kill: (port) => cluster.kill(port),
    async waitTakenOver(namespace, port) {
      await cluster.waitStreamLeader(`${namespace}_lease`, { not: port });
    },
    restart: (port) => cluster.restart(port),
    waitHealthy: (namespace) =>
      cluster.waitHealthy({ streams: [`${namespace}_store`, `${namespace}_lease`] }),
    stop: () => cluster.dispose(),
  };
}

/** What one round measured on one cluster. */
export interface ClusterFailoverResult {
  /** (a) the leader process SIGKILLed → the first occurrence on the other replica, in ms. */
  processKill: number;
  /** (b) the server holding the lease SIGKILLed → the longest gap between occurrences on any replica, in ms. */
  nodeGap: number;
  /** (b) the server holding the lease SIGKILLed → another server serves the lease, in ms. */
  nodeTakeover: number;
}

const FAILED: ClusterFailoverResult = {
  processKill: Number.NaN,
  nodeGap: Number.NaN,
  nodeTakeover: Number.NaN,
};

const RAN = /^RAN (\d+)$/;

/** Every `RAN` instant of the replicas, in order. */
function occurrences(replicas: Replica[]): number[] {
  return replicas
    .flatMap((r) => r.lines.map((line) => RAN.exec(line)?.[1]).filter((m) => m !== undefined))
    .map(Number)
    .sort((x, y) => x - y);
}

/** The longest interval between consecutive instants from the last one at or before `from` on. */
export function longestGap(instants: number[], from: number): number {
  let start = 0;
  for (let i = 0; i < instants.length; i++) if ((instants[i] as number) <= from) start = i;
  let longest = 0;
  for (let i = start + 1; i < instants.length; i++)
    longest = Math.max(longest, (instants[i] as number) - (instants[i - 1] as number));
  return longest;
}

/** Two replicas on store `namespace` of the cluster; runs `measure`, then kills both. */
async function withReplicas<T>(
  target: ClusterTarget,
  urls: string[],
  leadership: Leadership,
  measure: (leader: Replica, other: Replica, namespace: string) => Promise<T>,
): Promise<T> {
  const namespace = uniqueName('bench');
  const spec = { cluster: { target, urls } };
  const a = replica(spec, namespace, leadership);
  const b = replica(spec, namespace, leadership);
  try {
    const leader = await firstLeader([a, b], 60_000);
    await leader.wait(RAN, 0, 30_000);
    return await measure(leader, leader === a ? b : a, namespace);
  } finally {
    a.kill();
    b.kill();
    await Promise.all([a.exited, b.exited]);
  }
}

/** One round on one cluster: (a) then (b), each on a store of its own. */
async function measureRound(
  ctx: BenchContext,
  target: ClusterTarget,
  cluster: OwnCluster,
  leadership: Leadership,
): Promise<ClusterFailoverResult> {
  const processKill = await withReplicas(target, cluster.urls, leadership, async (leader, other) => {
    const killedAt = Date.now();
    leader.kill();
    await leader.exited;
    return (await other.wait(RAN, killedAt, 60_000)) - killedAt;
  });
  const node = await withReplicas(target, cluster.urls, leadership, async (leader, other, namespace) => {
    await leader.wait(RAN, Date.now(), 30_000);
    const port = await cluster.holder(namespace);
    const killedAt = Date.now();
    await cluster.kill(port);
    let restarted = false;
    try {
      await cluster.waitTakenOver(namespace, port);
      const takenOverAt = Date.now();
      await cluster.restart(port);
      restarted = true;
      await cluster.waitHealthy(namespace);
      // Whatever the lease went through, it has expired or been renewed twice over by now: the
      // calendar's first occurrence after this closes the gap.
      const settled = Math.max(
        Date.now(),
        takenOverAt + 2 * leadership.leadershipTTL + leadership.pollInterval,
      );
      await sleep(settled - Date.now());
      if (!(await until(() => occurrences([leader, other]).some((at) => at > settled), 60_000, 10)))
        throw new Error('no occurrence on either replica within 60 s after the cluster was whole again');
      const gap = longestGap(occurrences([leader, other]), killedAt);
      const lost = [leader, other].flatMap((r) =>
        r.lines.filter((line) => line.startsWith('LOST ') && Number(line.slice(5)) > killedAt),
      ).length;
      ctx.log(
        `  cluster-failover ${target}: server ${port} (holding the lease) killed; another served it after ${takenOverAt - killedAt} ms; longest gap between occurrences ${gap} ms; leadership ${lost > 0 ? `lost ${lost} time(s)` : 'kept'}`,
      );
      return { gap, takeover: takenOverAt - killedAt };
    } finally {
      if (!restarted) await cluster.restart(port).catch(() => {});
    }
  });
  return { processKill, nodeGap: node.gap, nodeTakeover: node.takeover };
}

/**
 * cluster-failover: leadership failover on a Redis Cluster and a NATS cluster of the workload's own (3
 * masters with a replica each; 3 servers with R3 streams). Two Scheduler replicas run an every-second
 * declaration; (a) the leader process is SIGKILLed: time to the first occurrence on the other replica;
 * (b) the server holding the leadership lease is SIGKILLed (Redis: the master of the store's slot; NATS:
 * the leader of the lease stream), then restarted once another server serves the lease: the longest gap
 * between occurrences on either replica (the period, 1 s, when the calendar went on untouched), and how
 * long the cluster took to serve the lease again.
 */
export async function clusterFailoverWorkload(ctx: BenchContext, targets: ClusterTarget[]): Promise<Row[]> {
  const leadership = ctx.quick ? QUICK : DEFAULTS;
  const settings = `leadershipTTL ${leadership.leadershipTTL / 1000} s, pollInterval ${leadership.pollInterval / 1000} s${ctx.quick ? '' : ' (the defaults)'}`;
  const clusters = new Map<ClusterTarget, OwnCluster | Error>();
  const subjects = targets.map((target) => ({ name: `duetime/${target}`, target }));
  try {
    for (const target of targets)
      clusters.set(
        target,
        await startCluster(target).catch((error: Error) => {
          ctx.log(`  cluster-failover ${target}: could not start the cluster: ${error.message}`);
          return error;
        }),
      );
    const samples = await alternate(
      ctx,
      subjects,
      'cluster-failover',
      async ({ target }) => {
        const cluster = clusters.get(target);
        if (!cluster || cluster instanceof Error)
          throw new Error(`no cluster: ${cluster?.message ?? 'not started'}`);
        return measureRound(ctx, target, cluster, leadership);
      },
      FAILED,
    );
    const rows = (metric: string, key: keyof ClusterFailoverResult) =>
      subjects.map((s) =>
        soloRow(
          'cluster-failover',
          metric,
          'ms',
          'lower',
          s.name,
          (samples.get(s.name) ?? []).map((r) => r[key]),
        ),
      );
    return [
      ...rows(`leader process SIGKILL → first occurrence on the other replica (${settings})`, 'processKill'),
      ...rows(
        `server holding the lease SIGKILLed → longest gap between occurrences, every ${PERIOD / 1000} s (${settings})`,
        'nodeGap',
      ),
      ...rows(
        `server holding the lease SIGKILLed → another server serves the lease (Redis: replica promoted, cluster-node-timeout ${REDIS_NODE_TIMEOUT / 1000} s; NATS: a new leader of the lease stream)`,
        'nodeTakeover',
      ),
    ];
  } finally {
    for (const cluster of clusters.values()) if (!(cluster instanceof Error)) await cluster.stop();
  }
}
