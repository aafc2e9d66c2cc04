import type { PrivateNatsCluster } from '@duetime/testing';
import Database from 'better-sqlite3';
import { SIZES } from './mode.js';
import { describeLeaderLoss, loseStreamLeader, type NodeFault } from './node-loss.js';
import { FaultProxy } from './proxy.js';
import type { Random } from './random.js';
import { hostAndPort, serviceUrl, type TargetSpec, urlVia, withUser } from './targets.js';

/**
 * The faults the outage run injects:
 * - `drop`: every connection through the proxy is cut at once;
 * - `blackhole`: no byte moves in either direction (connections stay open) for a while;
 * - `latency`: every chunk is delayed for a while;
 * - `down`: the server is unreachable for a while (open connections cut, new ones refused);
 * - `server`: the server itself ends duetime's sessions (PostgreSQL `pg_terminate_backend`, Redis
 *   `CLIENT KILL`) or restarts (a private NATS server);
 * - `lock` (SQLite): another process holds the database's write lock longer than the busy timeout;
 * - `node` (a NATS cluster): the server leading the store's stream is SIGKILLed and started again later.
 */
export type OutageKind = 'drop' | 'blackhole' | 'latency' | 'down' | 'server' | 'lock' | 'node';

/** Injects faults into one backend's path; `inject` returns once the fault has been healed. */
export interface FaultInjector {
  readonly kinds: readonly OutageKind[];
  /** The target the components under test open (through the proxy, where there is one). */
  readonly faulty: TargetSpec;
  /** The same data without the proxy (setup, the final drain and the audit). */
  readonly direct: TargetSpec;
  inject(kind: OutageKind, random: Random): Promise<string>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A proxy in front of the server of `direct`, plus the server-side fault when given. */
export async function proxiedInjector(
  direct: Exclude<TargetSpec, { kind: 'sqlite' }>,
  server?: { name: string; fault: (random: Random) => Promise<string> },
): Promise<FaultInjector> {
  const proxy = await FaultProxy.start(hostAndPort(direct.url));
  const faulty = { ...direct, url: urlVia(direct.url, '127.0.0.1', proxy.port) } as TargetSpec;
  const kinds: OutageKind[] = ['drop', 'blackhole', 'latency', 'down'];
  if (server) kinds.push('server');
  return {
    kinds,
    faulty,
    direct,
    async inject(kind, random) {
      switch (kind) {
        case 'drop':
          return `cut ${proxy.dropAll()} connections`;
        case 'blackhole': {
          const ms = random.int(300, SIZES.faultMs);
          proxy.blackhole();
          await sleep(ms);
          proxy.heal();
          return `blackhole for ${ms} ms`;
        }
        case 'latency': {
          const ms = random.int(300, SIZES.faultMs);
          const latency = random.int(20, 400);
          proxy.latency = latency;
          await sleep(ms);
          proxy.latency = 0;
          return `${latency} ms latency for ${ms} ms`;
        }
        case 'down': {
          const ms = random.int(200, SIZES.faultMs);
          proxy.refuse();
          const cut = proxy.dropAll();
          await sleep(ms);
          proxy.heal();
          return `down for ${ms} ms (${cut} connections cut)`;
        }
        case 'server':
          if (!server) throw new Error('no server-side fault for this backend');
          return server.fault(random);
        case 'lock':
          throw new Error('lock is a SQLite fault');
        case 'node':
          throw new Error('node is a cluster fault');
      }
    },
    close: () => proxy.close(),
  };
}

/** PostgreSQL: the server terminates every session of the target's application name. */
export function postgresTermination(target: Extract<TargetSpec, { kind: 'postgres' }>) {
  return {
    name: 'pg_terminate_backend',
    async fault() {
      const { default: pg } = await import('pg');
      const admin = new pg.Client({ connectionString: withUser(serviceUrl('postgres')) });
      await admin.connect();
      try {
        const result = await admin.query(
          'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
          [target.applicationName],
        );
        return `pg_terminate_backend on ${result.rows[0]?.n ?? 0} sessions`;
      } finally {
        await admin.end();
      }
    },
  };
}

/** Redis: the server kills every client connection named after the target's prefix. */
export function redisClientKill(target: Extract<TargetSpec, { kind: 'redis' }>) {
  return {
    name: 'CLIENT KILL',
    async fault() {
      const { Redis } = await import('ioredis');
      const admin = new Redis(serviceUrl('redis'), { maxRetriesPerRequest: 1 });
      try {
        const list = (await admin.client('LIST')) as string;
        const ids = list
          .split('\n')
          .filter((line) => / name=duetime:/.test(line) && line.includes(target.prefix))
          .map((line) => /(?:^|\s)id=(\d+)/.exec(line)?.[1])
          .filter((id): id is string => id !== undefined);
        for (const id of ids) await admin.client('KILL', 'ID', id);
        return `CLIENT KILL of ${ids.length} connections`;
      } finally {
        admin.disconnect();
      }
    },
  };
}

/**
 * SQLite: another connection (not duetime's) takes the write lock with `BEGIN IMMEDIATE` and holds it
 * for a while, longer than the target's busy timeout at times, so transactions fail with a transient
 * `BackendError` until it lets go.
 */
export function sqliteInjector(target: Extract<TargetSpec, { kind: 'sqlite' }>): FaultInjector {
  const db = new Database(target.file, { timeout: 0 });
  return {
    kinds: ['lock'],
    faulty: target,
    direct: target,
    async inject(_kind, random) {
      const ms = random.int(200, Math.max(SIZES.faultMs, 2 * (target.busyTimeoutMs ?? 5000)));
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          db.exec('BEGIN IMMEDIATE');
          break;
        } catch (error) {
          if (Date.now() > deadline) throw error;
          await sleep(2);
        }
      }
      await sleep(ms);
      db.exec('ROLLBACK');
      return `write lock held for ${ms} ms`;
    },
    async close() {
      db.close();
    },
  };
}

/**
 * A NATS cluster: each fault loses the server leading the store's stream (SIGKILL; started again before or
 * after another server took over) and returns once every replica is current again. No proxy: the
 * components connect to every server, as an application on a cluster does. `faults` collects what
 * happened, for placing the audit's findings in time.
 */
export function natsLeaderInjector(
  target: Extract<TargetSpec, { kind: 'nats' }>,
  cluster: PrivateNatsCluster,
  faults: NodeFault[],
): FaultInjector {
  const stream = `${target.prefix}_store`;
  const streams = [stream, `${target.prefix}_lease`];
  let count = 0;
  return {
    kinds: ['node'],
    faulty: target,
    direct: target,
    async inject(_kind, random) {
      const fault = await loseStreamLeader({ cluster, stream, streams, early: count++ % 2 === 1, random });
      faults.push(fault);
      return describeLeaderLoss(stream, fault);
    },
    async close() {},
  };
}
