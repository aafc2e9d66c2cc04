import type { ChildProcess } from 'node:child_process';
import { type Backend, Dispatcher } from '@duetime/core';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext, spawnChild, until } from '../lib/run.js';
import {
  type CpuSample,
  listeningPids,
  pgServerPids,
  portsOf,
  sampleCpu,
  sampleMachineCpu,
} from '../lib/server-load.js';
import type { ScaleoutTarget } from '../subjects/duetime.js';
import {
  NATS_CLUSTER_URLS,
  NATS_NEW_URL,
  PADDING,
  PG_URL,
  REDIS_CLUSTER_URLS,
  REDIS_URL,
  uniqueName,
} from '../subjects/types.js';

/**
 * Schedules per enqueue transaction: large enough to fill the store quickly, small enough for one NATS
 * atomic batch (at most 1,000 messages: a record and a timer per schedule, and the commit marker).
 */
const PER_TRANSACTION = 400;

/** Dispatcher processes per measurement. */
export const PROCESS_COUNTS = [1, 2, 4] as const;

/** What one drain measured. */
export interface ScaleoutResult {
  itemsPerSecond: number;
  /** CPU of the server processes during the drain, in % of one core (the machine has 2: at most 200). */
  serverPercent: number;
  /** CPU of the dispatcher processes together, in % of one core. */
  clientPercent: number;
  /** CPU of every process on the machine (other users' work included), in % of one core. */
  machinePercent: number;
}

const FAILED: ScaleoutResult = {
  itemsPerSecond: Number.NaN,
  serverPercent: Number.NaN,
  clientPercent: Number.NaN,
  machinePercent: Number.NaN,
};

/** One measured configuration: a server and how many dispatcher processes drain it. */
export interface ScaleoutRun {
  name: string;
  target: ScaleoutTarget;
  processes: number;
}

/** The subject label of a run: `duetime/postgres, 2 processes`. */
export function runName(target: ScaleoutTarget, processes: number): string {
  return `duetime/${target}, ${processes} process${processes > 1 ? 'es' : ''}`;
}

/** Every run of the workload for `targets`, in the order a round takes them. */
export function scaleoutRuns(targets: ScaleoutTarget[]): ScaleoutRun[] {
  return targets.flatMap((target) =>
    PROCESS_COUNTS.map((processes) => ({ name: runName(target, processes), target, processes })),
  );
}

/** The cluster client settings backend-redis documents for a `Cluster` (README, "Redis Cluster"). */
export const CLUSTER_OPTIONS = {
  redisOptions: { connectTimeout: 3000, maxRetriesPerRequest: 1 },
  enableOfflineQueue: true,
  retryDelayOnFailover: 200,
  retryDelayOnClusterDown: 200,
  retryDelayOnTryAgain: 200,
  slotsRefreshTimeout: 2000,
  slotsRefreshInterval: 2000,
  clusterRetryStrategy: (times: number) => Math.min(2000, 100 * times),
};

function startupNodes(): { host: string; port: number }[] {
  return REDIS_CLUSTER_URLS.map((url) => {
    const parsed = new URL(url);
    return { host: parsed.hostname, port: Number(parsed.port || 6379) };
  });
}

/** Where a target's server is, and how to start it, for errors that name it. */
function describeTarget(target: ScaleoutTarget): string {
  switch (target) {
    case 'postgres':
      return `PostgreSQL at ${PG_URL} (bash scripts/services.sh up)`;
    case 'redis':
      return `Redis at ${REDIS_URL} (bash scripts/services.sh up)`;
    case 'redis-cluster':
      return `the Redis Cluster at ${REDIS_CLUSTER_URLS.join(',')} (bash scripts/services.sh up --clusters, or DUETIME_REDIS_CLUSTER_URLS)`;
    case 'nats':
      return `NATS >= 2.12 at ${NATS_NEW_URL} (bash scripts/services.sh up, or DUETIME_NATS_NEW_URL)`;
    case 'nats-cluster':
      return `the NATS cluster at ${NATS_CLUSTER_URLS.join(',')} (bash scripts/services.sh up --clusters, or DUETIME_NATS_CLUSTER_URLS)`;
  }
}

/**
 * Opens duetime's backend for `target` on the store `namespace`, every setting at its default (NATS: from
 * DUETIME_NATS_NEW_URL; the cluster's streams with 3 replicas). PostgreSQL connections carry
 * `applicationName`, so the server processes serving them can be found.
 */
export async function openTarget(
  target: ScaleoutTarget,
  namespace: string,
  applicationName?: string,
): Promise<{ backend: Backend; close(): Promise<void> }> {
  try {
    switch (target) {
      case 'postgres': {
        const { createPostgresBackend } = await import('@duetime/backend-postgres');
        const backend = await createPostgresBackend(
          { connectionString: PG_URL },
          { schema: namespace, ...(applicationName ? { applicationName } : {}) },
        );
        return { backend, close: () => backend.close() };
      }
      case 'redis': {
        const { createRedisBackend } = await import('@duetime/backend-redis');
        const backend = await createRedisBackend({ url: REDIS_URL }, { prefix: namespace });
        return { backend, close: () => backend.close() };
      }
      case 'redis-cluster': {
        const { createRedisBackend } = await import('@duetime/backend-redis');
        const { Cluster } = await import('ioredis');
        const client = new Cluster(startupNodes(), CLUSTER_OPTIONS);
        client.on('error', () => {});
        try {
          const backend = await createRedisBackend({ client }, { prefix: namespace });
          return {
            backend,
            async close() {
              await backend.close();
              client.disconnect();
            },
          };
        } catch (error) {
          client.disconnect();
          throw error;
        }
      }
      case 'nats':
      case 'nats-cluster': {
        const { createNatsBackend } = await import('@duetime/backend-nats');
        const backend = await createNatsBackend(
          { servers: target === 'nats' ? NATS_NEW_URL : NATS_CLUSTER_URLS },
          { prefix: namespace, ...(target === 'nats-cluster' ? { replicas: 3 } : {}) },
        );
        return { backend, close: () => backend.close() };
      }
    }
  } catch (error) {
    throw new Error(`could not open ${describeTarget(target)}: ${(error as Error).message}`);
  }
}

/** Deletes the store `namespace` of `target` (close every backend on it first). */
async function dropTarget(target: ScaleoutTarget, namespace: string): Promise<void> {
  switch (target) {
    case 'postgres': {
      const { Client } = await import('pg');
      const client = new Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${namespace}" CASCADE`);
      await client.end();
      return;
    }
    case 'redis':
    case 'redis-cluster': {
      const { Cluster, Redis } = await import('ioredis');
      const client = target === 'redis' ? new Redis(REDIS_URL) : new Cluster(startupNodes(), CLUSTER_OPTIONS);
      client.on('error', () => {});
      try {
        if (client instanceof Cluster) await client.cluster('INFO');
        // A store's keys share its hash tag: on a cluster they are all on the master serving its slot.
        const nodes = client instanceof Cluster ? client.nodes('master') : [client];
        for (const node of nodes) {
          let cursor = '0';
          do {
            const [next, keys] = await node.scan(cursor, 'MATCH', `{${namespace}}:*`, 'COUNT', 1000);
            cursor = next;
            if (keys.length > 0) await node.unlink(...keys);
          } while (cursor !== '0');
        }
      } finally {
        client.disconnect();
      }
      return;
    }
    case 'nats':
    case 'nats-cluster': {
      const { connectNats, deleteNatsBackendData } = await import('@duetime/backend-nats');
      const nc = await connectNats(target === 'nats' ? NATS_NEW_URL : NATS_CLUSTER_URLS);
      try {
        await deleteNatsBackendData(nc, namespace);
      } finally {
        await nc.close();
      }
      return;
    }
  }
}

/**
 * The pids of `target`'s server processes on this machine, for CPU sampling: the PostgreSQL processes
 * serving `applicationName` and the server's background processes (asked through `pg`, a connection of
 * the sampler's own), or the processes listening on the servers' ports.
 */
function serverPids(target: ScaleoutTarget, applicationName: string, pg?: import('pg').Client) {
  switch (target) {
    case 'postgres':
      return () => pgServerPids(pg!, applicationName);
    case 'redis':
      return () => listeningPids(portsOf([REDIS_URL], 6379));
    case 'redis-cluster':
      return () => listeningPids(portsOf(REDIS_CLUSTER_URLS, 6379));
    case 'nats':
      return () => listeningPids(portsOf([NATS_NEW_URL], 4222));
    case 'nats-cluster':
      return () => listeningPids(portsOf(NATS_CLUSTER_URLS, 4222));
  }
}

/**
 * In a child process: one Dispatcher with the default settings and a no-op processor on the store
 * `namespace` of `target`. Prints `READY` once the backend is open (lib/child.ts prints `FAILED <reason>`
 * if it cannot start), starts on SIGUSR2, prints
 * `DELIVERED <n>` whenever its count of committed deliveries changes, and drains and exits on SIGTERM.
 */
export async function scaleoutChild(args: Record<string, unknown>): Promise<{ delivered: number }> {
  const target = args.target as ScaleoutTarget;
  const opened = await openTarget(target, String(args.namespace), String(args.applicationName));
  const dispatcher = new Dispatcher({ store: opened.backend.store, processor: async () => {} });
  const go = new Promise<void>((resolve) => process.once('SIGUSR2', () => resolve()));
  const stop = new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
  console.log('READY');
  await go;
  const controller = new AbortController();
  const done = dispatcher.run(controller.signal);
  let reported = -1;
  const report = () => {
    const delivered = dispatcher.snapshot().delivered;
    if (delivered === reported) return;
    reported = delivered;
    console.log(`DELIVERED ${delivered}`);
  };
  const timer = setInterval(report, 10);
  await stop;
  clearInterval(timer);
  controller.abort();
  await done;
  report();
  await opened.close();
  return { delivered: dispatcher.snapshot().delivered };
}

/** A dispatcher process of {@link scaleoutChild}, as the parent sees it. */
interface Worker {
  child: ChildProcess;
  ready: boolean;
  /** Why the process could not start, as it said. */
  failed?: string;
  delivered: number;
  exited: Promise<unknown>;
}

function startWorker(target: ScaleoutTarget, namespace: string, applicationName: string): Worker {
  const child = spawnChild('scaleout', { target, namespace, applicationName });
  const worker: Worker = {
    child,
    ready: false,
    delivered: 0,
    exited: new Promise((resolve) => child.once('exit', resolve)),
  };
  let buffer = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    const lines = buffer.split('\n');
    buffer = lines.pop() ?? '';
    for (const line of lines) {
      if (line === 'READY') worker.ready = true;
      if (line.startsWith('FAILED ')) worker.failed = line.slice('FAILED '.length);
      const m = /^DELIVERED (\d+)$/.exec(line);
      if (m) worker.delivered = Number(m[1]);
    }
  });
  return worker;
}

/** CPU seconds over a window as % of one core. */
function percent(sample: CpuSample | number | undefined, seconds: number): number {
  const cpu = typeof sample === 'number' || sample === undefined ? sample : sample.seconds;
  return cpu === undefined ? Number.NaN : Math.round((cpu / seconds) * 1000) / 10;
}

/**
 * One drain: `count` due items written to a fresh store (400 per transaction), then `processes` dispatcher
 * processes started together → items/s from their start until the last item's delivery is committed, and
 * the CPU of the servers, of the dispatcher processes and of the whole machine meanwhile. Afterwards the
 * store must hold no schedule (each item consumed once).
 */
async function drainOnce(
  ctx: BenchContext,
  target: ScaleoutTarget,
  processes: number,
  count: number,
): Promise<ScaleoutResult> {
  const namespace = uniqueName('bench');
  const applicationName = `duetime-bench-scaleout-${namespace}`;
  const workers: Worker[] = [];
  let pg: import('pg').Client | undefined;
  try {
    const opened = await openTarget(target, namespace);
    try {
      const base = Date.now() - 60_000;
      for (let i = 0; i < count; i += PER_TRANSACTION) {
        const end = Math.min(count, i + PER_TRANSACTION);
        await opened.backend.store.transact(async (tx) => {
          for (let j = i; j < end; j++)
            await tx.schedule(`scaleout/${j}`, new Date(base + j), {
              type: 'bench',
              aggregateId: `a${j}`,
              data: { pad: PADDING },
            });
        });
      }
    } finally {
      await opened.close();
    }
    for (let i = 0; i < processes; i++) workers.push(startWorker(target, namespace, applicationName));
    const started = await until(
      () => workers.every((w) => w.ready) || workers.some((w) => w.child.exitCode !== null),
      60_000,
      10,
    );
    const failure = workers.find((w) => w.failed)?.failed;
    if (failure) throw new Error(`a dispatcher process could not start: ${failure}`);
    if (!started || !workers.every((w) => w.ready))
      throw new Error(`the dispatcher processes did not start within 60 s (${describeTarget(target)})`);
    if (target === 'postgres') {
      const { Client } = await import('pg');
      pg = new Client({ connectionString: PG_URL, application_name: `${applicationName}-sampler` });
      await pg.connect();
    }
    const server = sampleCpu(serverPids(target, applicationName, pg));
    const clients = sampleCpu(() => workers.map((w) => w.child.pid!));
    await Promise.all([server.ready, clients.ready]);
    const machine = sampleMachineCpu();
    const t0 = performance.now();
    for (const w of workers) w.child.kill('SIGUSR2');
    const delivered = () => workers.reduce((sum, w) => sum + w.delivered, 0);
    const finished = await until(() => delivered() >= count, ctx.quick ? 120_000 : 900_000, 5);
    const elapsed = (performance.now() - t0) / 1000;
    const [serverCpu, clientCpu] = await Promise.all([server.stop(), clients.stop()]);
    const machineCpu = machine.stop();
    const cpuSeconds = (performance.now() - t0) / 1000;
    for (const w of workers) w.child.kill('SIGTERM');
    await Promise.all(workers.map((w) => w.exited));
    if (!finished) throw new Error(`${processes} processes delivered only ${delivered()} of ${count}`);
    if (delivered() !== count) ctx.log(`  scaleout ${target}: ${delivered()} deliveries for ${count} items`);
    const check = await openTarget(target, namespace);
    try {
      const left = await check.backend.store.pageSchedules({ limit: 1 });
      if (left.items.length > 0) throw new Error(`schedules left in the store after the drain`);
    } finally {
      await check.close();
    }
    if (serverCpu.seconds === undefined)
      ctx.log(`  scaleout ${target}: no server process found on this machine (server CPU n/a)`);
    return {
      itemsPerSecond: Math.round(count / elapsed),
      serverPercent: percent(serverCpu, cpuSeconds),
      clientPercent: percent(clientCpu, cpuSeconds),
      machinePercent: percent(machineCpu, cpuSeconds),
    };
  } finally {
    for (const w of workers)
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    await pg?.end().catch(() => {});
    await dropTarget(target, namespace).catch((error: Error) =>
      ctx.log(`  scaleout ${target}: could not delete store ${namespace}: ${error.message}`),
    );
  }
}

/**
 * The workload's rows from its samples (per run name, one result per round): items/s, the ratio to one
 * process in the same round, and the CPU shares of the servers, the dispatcher processes and the machine.
 */
export function scaleoutRows(
  count: number,
  runs: ScaleoutRun[],
  samples: Map<string, ScaleoutResult[]>,
): Row[] {
  const label = `${count.toLocaleString('en-US')} due items`;
  const pick = (key: keyof ScaleoutResult) => (run: ScaleoutRun) =>
    (samples.get(run.name) ?? []).map((r) => r[key]);
  const solo = (
    metric: string,
    unit: string,
    better: 'higher' | 'lower',
    values: (run: ScaleoutRun) => number[],
  ) =>
    runs
      .filter((run) => samples.has(run.name))
      .map((run) => soloRow('scaleout', metric, unit, better, run.name, values(run)));
  const ratio = (run: ScaleoutRun) => {
    const own = pick('itemsPerSecond')(run);
    const one = pick('itemsPerSecond')({ ...run, name: runName(run.target, 1) });
    return own.map((v, i) => Math.round((v / (one[i] ?? Number.NaN)) * 100) / 100);
  };
  return [
    ...solo(`${label}, drained by N dispatcher processes`, 'items/s', 'higher', pick('itemsPerSecond')),
    ...solo(`${label}, items/s with N processes ÷ with 1 (same round)`, '×', 'higher', ratio).filter(
      (row) => !row.subject.endsWith(', 1 process'),
    ),
    ...solo(
      `${label}, server processes' CPU during the drain`,
      '% of a core',
      'lower',
      pick('serverPercent'),
    ),
    ...solo(
      `${label}, the dispatcher processes' CPU together`,
      '% of a core',
      'lower',
      pick('clientPercent'),
    ),
    ...solo(
      `${label}, the whole machine's CPU (every process; 2 cores: at most 200%)`,
      '% of a core',
      'lower',
      pick('machinePercent'),
    ),
  ];
}

/**
 * scaleout: due items drained by 1, 2 and 4 dispatcher processes (each one Dispatcher with the default
 * settings and a no-op processor) on each server → items/s, its ratio to one process, and what the servers
 * and the dispatcher processes used of the machine's cores meanwhile.
 */
export async function scaleoutWorkload(ctx: BenchContext, targets: ScaleoutTarget[]): Promise<Row[]> {
  const count = ctx.quick ? 5000 : 50_000;
  const runs = scaleoutRuns(targets);
  const samples = await alternate(
    ctx,
    runs,
    'scaleout',
    (run) => drainOnce(ctx, run.target, run.processes, count),
    FAILED,
  );
  return scaleoutRows(count, runs, samples);
}
