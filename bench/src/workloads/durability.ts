import { createRedisBackend, type RedisBackendOptions } from '@duetime/backend-redis';
import type { Backend } from '@duetime/core';
import { PrivateRedisCluster, PrivateRedisServer } from '@duetime/testing';
import { Cluster } from 'ioredis';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext } from '../lib/run.js';
import { percentile } from '../lib/stats.js';
import { uniqueName } from '../subjects/types.js';

/** One way to run Redis under duetime, on servers of the workload's own (never the shared one). */
interface Setup {
  name: string;
  start(): Promise<{ open(prefix: string): Promise<Backend>; stop(): Promise<void> }>;
}

function single(name: string, serverArgs: string[]): Setup {
  return {
    name,
    async start() {
      const server = await PrivateRedisServer.start({ serverArgs });
      return {
        open: (prefix) => createRedisBackend({ url: server.url }, { prefix }),
        stop: () => server.stop(),
      };
    },
  };
}

function cluster(name: string, options: RedisBackendOptions): Setup {
  return {
    name,
    async start() {
      const nodes = await PrivateRedisCluster.start({ masters: 3, replicas: 1 });
      return {
        async open(prefix) {
          const client = new Cluster(
            nodes.urls.map((url) => ({ host: '127.0.0.1', port: Number(new URL(url).port) })),
          );
          const backend = await createRedisBackend({ client }, { prefix, ...options });
          const close = backend.close.bind(backend);
          return Object.assign(backend, {
            async close() {
              await close();
              client.disconnect();
            },
          });
        },
        stop: () => nodes.stop(),
      };
    },
  };
}

const SETUPS: Setup[] = [
  single('redis, no persistence', []),
  single('redis, AOF everysec', ['--appendonly', 'yes', '--appendfsync', 'everysec']),
  single('redis, AOF always', ['--appendonly', 'yes', '--appendfsync', 'always']),
  cluster('redis cluster (3 masters, 1 replica each)', {}),
  cluster('redis cluster, waitForReplicas 1', { waitForReplicas: 1 }),
];

interface Sample {
  p50: number;
  p99: number;
  perSecond: number;
}

/** One schedule per transaction: `sequential` one after the other (latency), then `total` from 16 at once. */
async function measure(backend: Backend, sequential: number, total: number): Promise<Sample> {
  const at = new Date(Date.now() + 3_600_000);
  const commit = (key: string) =>
    backend.store.transact((tx) => tx.schedule(key, at, { type: 'bench', aggregateId: key }));
  const latencies: number[] = [];
  for (let i = 0; i < sequential; i++) {
    const started = performance.now();
    await commit(`seq/${i}`);
    latencies.push(performance.now() - started);
  }
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i = next++; i < total; i = next++) await commit(`par/${i}`);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), perSecond: total / seconds };
}

/**
 * durability: what Redis's persistence and replication settings cost a commit (one schedule per
 * transaction): latency one at a time (p50, p99) and throughput with 16 transactions in flight, on a
 * single server without persistence, with AOF `everysec` and `always`, and on a Redis Cluster without and
 * with `waitForReplicas: 1`. What each setting keeps through a crash or a failover is measured by the
 * reliability suite (docs/reliability.md).
 */
export async function durabilityWorkload(ctx: BenchContext): Promise<Row[]> {
  const sequential = ctx.quick ? 200 : 1000;
  const total = ctx.quick ? 1000 : 5000;
  const started = new Map<string, Awaited<ReturnType<Setup['start']>>>();
  try {
    for (const setup of SETUPS) started.set(setup.name, await setup.start());
    const failed: Sample = { p50: Number.NaN, p99: Number.NaN, perSecond: Number.NaN };
    const results = await alternate(
      ctx,
      SETUPS,
      'durability',
      async (setup) => {
        const backend = await started.get(setup.name)!.open(uniqueName('dur'));
        try {
          return await measure(backend, sequential, total);
        } finally {
          await backend.close();
        }
      },
      failed,
    );
    const rows: Row[] = [];
    for (const setup of SETUPS) {
      const samples = results.get(setup.name) ?? [];
      const subject = `duetime/${setup.name}`;
      rows.push(
        soloRow(
          'durability',
          'commit latency p50, one at a time',
          'ms',
          'lower',
          subject,
          samples.map((s) => s.p50),
        ),
        soloRow(
          'durability',
          'commit latency p99, one at a time',
          'ms',
          'lower',
          subject,
          samples.map((s) => s.p99),
        ),
        soloRow(
          'durability',
          'commits per second, 16 in flight',
          'commits/s',
          'higher',
          subject,
          samples.map((s) => s.perSecond),
        ),
      );
    }
    return rows;
  } finally {
    await Promise.allSettled([...started.values()].map((s) => s.stop()));
  }
}
