import { every, Registry, Scheduler } from '@duetime/core';
import { type Row, soloRow } from '../lib/report.js';
import { type BenchContext, sleep, spawnChild } from '../lib/run.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';

/** The Scheduler's leadership settings: its defaults, and shorter ones in quick mode. */
export interface Leadership {
  leadershipTTL: number;
  pollInterval: number;
}
export const DEFAULTS: Leadership = { leadershipTTL: 10_000, pollInterval: 1000 };
export const QUICK: Leadership = { leadershipTTL: 2000, pollInterval: 250 };

/** Where a replica's backend is: one of duetime's backends on its usual server, or a cluster's servers. */
export type ReplicaTarget =
  | { backend: DuetimeBackendName }
  | { cluster: { target: 'redis-cluster' | 'nats-cluster'; urls: string[] } };

/**
 * In a child process: a Scheduler running one declaration every second, printing `LEADER <ms>` each time
 * it becomes leader, `LOST <ms>` each time it loses leadership, and `RAN <ms>` each time the handler starts.
 */
export async function replicaChild(args: Record<string, unknown>): Promise<never> {
  const target = args.target as ReplicaTarget;
  const namespace = String(args.namespace);
  const backend =
    'cluster' in target
      ? await (await import('./cluster-failover.js')).openOnCluster(target.cluster, namespace)
      : (await openDuetime(target.backend, namespace)).backend;
  const leadership = args.leadership as Leadership;
  const scheduler = new Scheduler({
    registry: new Registry(every('tick', 1000, () => void console.log(`RAN ${Date.now()}`))),
    backend,
    leadershipTTL: leadership.leadershipTTL,
    pollInterval: leadership.pollInterval,
    logger: {
      debug() {},
      info: (message) => {
        if (message === 'became leader') console.log(`LEADER ${Date.now()}`);
      },
      warn: (message) => {
        if (message === 'lost leadership') console.log(`LOST ${Date.now()}`);
      },
      error() {},
    },
  });
  await scheduler.run();
  process.exit(0);
}

export interface Replica {
  kill(): void;
  lines: string[];
  /** The first time in a line matching `pattern` (its first group) later than `after`. */
  wait(pattern: RegExp, after: number, timeoutMs: number): Promise<number>;
  exited: Promise<unknown>;
}

/** Starts a replica of {@link replicaChild} in a process of its own. */
export function replica(target: ReplicaTarget, namespace: string, leadership: Leadership): Replica {
  const child = spawnChild('replica', { target, namespace, leadership });
  const lines: string[] = [];
  let buffer = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    const parts = buffer.split('\n');
    buffer = parts.pop() ?? '';
    lines.push(...parts);
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    kill: () => child.kill('SIGKILL'),
    lines,
    exited,
    async wait(pattern, after, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const line of lines) {
          const m = pattern.exec(line);
          if (m && Number(m[1]) > after) return Number(m[1]);
        }
        if (Date.now() > deadline) throw new Error(`no ${pattern} from a replica within ${timeoutMs} ms`);
        await sleep(10);
      }
    },
  };
}

/** The replica that prints `LEADER` first. */
export async function firstLeader(replicas: Replica[], timeoutMs: number): Promise<Replica> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const leader = replicas.find((r) => r.lines.some((line) => line.startsWith('LEADER ')));
    if (leader) return leader;
    if (Date.now() > deadline) throw new Error(`no replica became leader within ${timeoutMs} ms`);
    await sleep(10);
  }
}

/**
 * 7. failover: the leader SIGKILLed → first occurrence admitted by the new leader, per backend, with the
 * default settings (quick mode: shorter leadership settings, named in the metric). The bound is
 * `leadershipTTL + pollInterval`; where a run lands depends on when the killed leader last renewed.
 */
export async function failoverWorkload(ctx: BenchContext, backends: DuetimeBackendName[]): Promise<Row[]> {
  const rounds = ctx.rounds;
  const leadership = ctx.quick ? QUICK : DEFAULTS;
  const settings = `leadershipTTL ${leadership.leadershipTTL / 1000} s, pollInterval ${leadership.pollInterval / 1000} s${ctx.quick ? '' : ' (the defaults)'}`;
  const rows: Row[] = [];
  for (const kind of backends) {
    const samples: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const { backend, namespace, drop } = await openDuetime(kind);
      await backend.close();
      const a = replica({ backend: kind }, namespace, leadership);
      const b = replica({ backend: kind }, namespace, leadership);
      try {
        const first = await firstLeader([a, b], 60_000);
        const other = first === a ? b : a;
        await first.wait(/^RAN (\d+)$/, 0, 30_000);
        const killedAt = Date.now();
        first.kill();
        await first.exited;
        const ranAt = await other.wait(/^RAN (\d+)$/, killedAt, 60_000);
        samples.push(ranAt - killedAt);
        ctx.log(`  failover ${kind} round ${round + 1}/${rounds}: ${ranAt - killedAt} ms`);
      } catch (error) {
        ctx.log(`  failover ${kind} round ${round + 1}/${rounds}: FAILED ${(error as Error).message}`);
        samples.push(Number.NaN);
      } finally {
        a.kill();
        b.kill();
        await Promise.all([a.exited, b.exited]);
        await drop();
      }
    }
    rows.push(
      soloRow(
        'failover',
        `leader SIGKILL → first occurrence on the new leader (${settings})`,
        'ms',
        'lower',
        `duetime/${kind}`,
        samples,
      ),
    );
  }
  return rows;
}
