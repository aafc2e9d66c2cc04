import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { every, Registry, Scheduler } from '@duetime/core';
import type { Row } from '../lib/report.js';
import type { BenchContext } from '../lib/run.js';
import { summarize } from '../lib/stats.js';
import { type DuetimeBackendName, openDuetime } from '../subjects/duetime.js';

const BACKENDS: DuetimeBackendName[] = ['sqlite', 'postgres', 'redis', 'nats'];
const require = createRequire(import.meta.url);
const childEntry = fileURLToPath(new URL('../lib/child.ts', import.meta.url));

/**
 * In a child process: a Scheduler with default settings running one declaration every second, printing
 * `LEADER <ms>` when it becomes leader and `RAN <ms>` each time the handler starts.
 */
export async function replicaChild(args: Record<string, unknown>): Promise<never> {
  const { backend } = await openDuetime(args.backend as DuetimeBackendName, String(args.namespace));
  let leader = false;
  const scheduler = new Scheduler({
    registry: new Registry(every('tick', 1000, () => void console.log(`RAN ${Date.now()}`))),
    backend,
    logger: {
      debug() {},
      info: (message) => {
        if (message === 'became leader' && !leader) {
          leader = true;
          console.log(`LEADER ${Date.now()}`);
        }
      },
      warn() {},
      error() {},
    },
  });
  await scheduler.run();
  process.exit(0);
}

interface Replica {
  kill(): void;
  lines: string[];
  wait(pattern: RegExp, after: number, timeoutMs: number): Promise<number>;
  exited: Promise<unknown>;
}

function replica(kind: DuetimeBackendName, namespace: string): Replica {
  const child = spawn(
    process.execPath,
    [
      '--import',
      pathToFileURL(require.resolve('tsx')).href,
      '--conditions=source',
      childEntry,
      'replica',
      JSON.stringify({ backend: kind, namespace }),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines: string[] = [];
  let buffer = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
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
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
  };
}

/** 7. failover: the leader SIGKILLed → first occurrence admitted by the new leader, per backend (default settings). */
export async function failoverWorkload(ctx: BenchContext): Promise<Row[]> {
  const rounds = ctx.quick ? 1 : ctx.rounds;
  const rows: Row[] = [];
  for (const kind of BACKENDS) {
    const samples: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const { backend, namespace, drop } = await openDuetime(kind);
      await backend.close();
      const a = replica(kind, namespace);
      const b = replica(kind, namespace);
      try {
        const first = await Promise.race([
          a.wait(/^LEADER (\d+)$/, 0, 60_000).then(() => a),
          b.wait(/^LEADER (\d+)$/, 0, 60_000).then(() => b),
        ]);
        const other = first === a ? b : a;
        await first.wait(/^RAN (\d+)$/, 0, 30_000);
        const killedAt = Date.now();
        first.kill();
        await first.exited;
        const ranAt = await other.wait(/^RAN (\d+)$/, killedAt, 60_000);
        samples.push(ranAt - killedAt);
        ctx.log(`  failover ${kind} round ${round + 1}/${rounds}: ${ranAt - killedAt} ms`);
      } finally {
        a.kill();
        b.kill();
        await Promise.all([a.exited, b.exited]);
        await drop();
      }
    }
    rows.push({
      workload: 'failover',
      metric: 'leader SIGKILL → first occurrence on the new leader (leadershipTTL 10 s, pollInterval 1 s)',
      unit: 'ms',
      better: 'lower',
      subject: `duetime/${kind}`,
      summary: summarize(samples),
    });
  }
  return rows;
}
