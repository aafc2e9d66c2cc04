import { type Row, rowsFor } from '../lib/report.js';
import { alternate, type BenchContext, inChild, rssMb, sleep } from '../lib/run.js';
import { countRedisCommands, samplePgServerCpu } from '../lib/server-load.js';
import { subjectByName } from '../subjects/index.js';
import { type Item, type Subject, uniqueName } from '../subjects/types.js';

export interface IdleResult {
  /** CPU seconds of the worker process during the idle window. */
  cpuSeconds: number;
  rssMb: number;
  /** PostgreSQL subjects: CPU seconds of the server processes serving the worker during the window. */
  serverCpuSeconds?: number;
  /** Redis subjects: commands sent per second during the window. */
  redisCommandsPerSecond?: number;
  /** Bytes the server holds per pending item (growth from the empty queue, divided by the count). */
  bytesPerItem: number;
}

const NAN: IdleResult = { cpuSeconds: Number.NaN, rssMb: Number.NaN, bytesPerItem: Number.NaN };

/**
 * In a process of its own: opens the queue `name` and enqueues `count` items due in an hour, then closes
 * it, leaving the items for the worker's process.
 */
export async function idleFillChild(args: Record<string, unknown>): Promise<{ enqueued: number }> {
  const subject = subjectByName(String(args.subject));
  const count = Number(args.count);
  const queue = await subject.create({ name: String(args.name), keep: true });
  try {
    const run = Math.random().toString(36).slice(2, 8);
    const dueAt = Date.now() + 3_600_000;
    const items: Item[] = Array.from({ length: count }, (_, i) => ({ id: `${run}-${i}`, dueAt: dueAt + i }));
    for (let i = 0; i < items.length; i += 1000) await queue.enqueueBatch(items.slice(i, i + 1000));
    return { enqueued: count };
  } finally {
    await queue.close();
  }
}

/**
 * In a fresh process: a queue that another process fills with `count` items due in an hour (so this
 * process's memory holds none of that work), then a worker (concurrency 16) started and left idle for
 * `idleMs` after a second to settle → its CPU and RSS, what it costs the server, and storage per item.
 */
export async function idleChild(args: Record<string, unknown>): Promise<IdleResult> {
  const subject = subjectByName(String(args.subject));
  const count = Number(args.count);
  const idleMs = Number(args.idleMs);
  const applicationName = `duetime-bench-idle-${process.pid}`;
  const commands = subject.backend === 'redis' ? await countRedisCommands() : undefined;
  const name = uniqueName('idle');
  const queue = await subject.create({ applicationName, name });
  try {
    const emptyBytes = await queue.storageBytes();
    await inChild('idle-fill', { subject: subject.name, name, count });
    const stop = await queue.startWorker({ concurrency: 16, onJob: () => {} });
    await sleep(1000);
    globalThis.gc?.();
    const server = subject.backend === 'postgres' ? await samplePgServerCpu(applicationName) : undefined;
    const sentBefore = commands?.count() ?? 0;
    const before = process.cpuUsage();
    await sleep(idleMs);
    const used = process.cpuUsage(before);
    const sent = (commands?.count() ?? 0) - sentBefore;
    const serverCpuSeconds = await server?.stop();
    const rss = rssMb();
    await stop();
    const bytes = await queue.storageBytes();
    return {
      cpuSeconds: Math.round(((used.user + used.system) / 1e6) * 1000) / 1000,
      rssMb: rss,
      ...(server ? { serverCpuSeconds: serverCpuSeconds ?? Number.NaN } : {}),
      ...(commands ? { redisCommandsPerSecond: Math.round((sent / idleMs) * 10_000) / 10 } : {}),
      bytesPerItem: Math.round((bytes - emptyBytes) / count),
    };
  } finally {
    await queue.close();
  }
}

/**
 * 4. idle cost: items due in an hour, the worker idle → CPU seconds and RSS of the worker process, server
 * CPU (PostgreSQL) or commands sent (Redis) meanwhile, and the server's bytes per pending item.
 */
export async function idleWorkload(ctx: BenchContext, subjects: Subject[]): Promise<Row[]> {
  const count = ctx.quick ? 2000 : 100_000;
  const idleMs = ctx.quick ? 2000 : 30_000;
  const samples = await alternate(
    ctx,
    subjects,
    'idle',
    (subject) => inChild<IdleResult>('idle', { subject: subject.name, count, idleMs }),
    NAN,
  );
  const pick = (key: keyof IdleResult, on?: Subject['backend']) =>
    new Map(
      [...samples]
        .filter(([name]) => !on || subjects.find((s) => s.name === name)?.backend === on)
        .map(([name, values]) => [name, values.map((v) => v[key] ?? Number.NaN)]),
    );
  const label = `${count.toLocaleString('en-US')} pending, idle ${idleMs / 1000} s`;
  return [
    ...rowsFor('idle', `${label}, worker CPU`, 's', 'lower', subjects, pick('cpuSeconds')),
    ...rowsFor('idle', `${label}, worker RSS`, 'MB', 'lower', subjects, pick('rssMb')),
    ...rowsFor(
      'idle',
      `${label}, PostgreSQL server CPU of the worker's connections`,
      's',
      'lower',
      subjects,
      pick('serverCpuSeconds', 'postgres'),
    ),
    ...rowsFor(
      'idle',
      `${label}, Redis commands sent per second`,
      'commands/s',
      'lower',
      subjects,
      pick('redisCommandsPerSecond', 'redis'),
    ),
    ...rowsFor(
      'idle',
      `${count.toLocaleString('en-US')} pending, storage per pending item (same 64-byte padded payload)`,
      'B',
      'lower',
      subjects,
      pick('bytesPerItem'),
    ),
  ];
}
