import { readFileSync } from 'node:fs';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext, sleep } from '../lib/run.js';
import { cpuTicks, listeningPids } from '../lib/server-load.js';
import { percentile } from '../lib/stats.js';

const HOUR = 3_600_000;
/** Timers whose lateness is measured, spread over `SPREAD_MS`, with the pending ones in the server. */
const TIMED = 200;
const SPREAD_MS = 2_000;
/** Timers due while the server is down, and how long it stays down. */
const DUE_WHILE_DOWN = 50;
const DOWN_MS = 2_000;
const IN_FLIGHT = 500;

interface Result {
  publishedPerSec: number;
  bytesPerSchedule: number;
  idleCpuPercent: number;
  p50: number;
  p99: number;
  restartMs: number;
  downFiredMs: number;
}

const FAILED: Result = {
  publishedPerSec: Number.NaN,
  bytesPerSchedule: Number.NaN,
  idleCpuPercent: Number.NaN,
  p50: Number.NaN,
  p99: Number.NaN,
  restartMs: Number.NaN,
  downFiredMs: Number.NaN,
};

function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : Number.NaN;
}

/** The server's pid (it listens on `port`). */
function serverPid(port: number): number {
  const [pid] = listeningPids([port]);
  if (pid === undefined) throw new Error(`no process listens on port ${port}`);
  return pid;
}

/** Publishes `count` schedules on `<p>.<kind>.<i>` firing into `<p>.<target>.<i>` at `due(i)`. */
async function schedule(
  nc: NatsConnection,
  p: string,
  kind: string,
  target: string,
  count: number,
  due: (i: number) => number,
): Promise<void> {
  const js = jetstream(nc);
  let inflight: Promise<unknown>[] = [];
  for (let i = 0; i < count; i++) {
    const h = headers();
    h.set('Nats-Schedule', `@at ${new Date(due(i)).toISOString()}`);
    h.set('Nats-Schedule-Target', `${p}.${target}.${i}`);
    h.set('Bench-Due', String(due(i)));
    inflight.push(js.publish(`${p}.${kind}.${i}`, '{"type":"bench"}', { headers: h }));
    if (inflight.length >= IN_FLIGHT) {
      await Promise.all(inflight);
      inflight = [];
    }
  }
  await Promise.all(inflight);
}

/** Reads what fires into `<p>.<target>.>` and records each message's lateness (receive − due). */
async function fired(nc: NatsConnection, stream: string, p: string, target: string) {
  const jsm = await jetstreamManager(nc);
  await jsm.consumers.add(stream, {
    durable_name: target,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: `${p}.${target}.>`,
  });
  const messages = await (await jetstream(nc).consumers.get(stream, target)).consume();
  const lateness: number[] = [];
  void (async () => {
    for await (const m of messages) {
      lateness.push(Date.now() - Number(m.headers?.get('Bench-Due')));
      m.ack();
    }
  })();
  return {
    lateness,
    async until(count: number, timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (lateness.length < count && Date.now() < deadline) await sleep(10);
      if (lateness.length < count) throw new Error(`only ${lateness.length} of ${count} timers fired`);
    },
    stop: () => messages.stop(),
  };
}

/** One round: a private server, `count` pending schedules, then the measurements. */
async function round(count: number): Promise<Result> {
  const server = await PrivateNatsServer.start({ binary: newerNatsServerBinary(), startTimeoutMs: 120_000 });
  let nc: NatsConnection | undefined;
  try {
    const stream = 'PENDING';
    const p = 'pending';
    nc = await connect({ servers: server.url });
    await (await jetstreamManager(nc)).streams.add({
      name: stream,
      subjects: [`${p}.>`],
      storage: StorageType.File,
      allow_direct: true,
      ...({ allow_msg_schedules: true } as object),
    });
    const pid = serverPid(server.port);
    const rssBefore = rssBytes(pid);
    const far = Date.now() + HOUR;
    const started = performance.now();
    await schedule(nc, p, 's', 'f', count, () => far);
    const publishedPerSec = count / ((performance.now() - started) / 1000);
    const bytesPerSchedule = (rssBytes(pid) - rssBefore) / count;

    const idleFrom = cpuTicks(pid) ?? Number.NaN;
    await sleep(5_000);
    const idleCpuPercent = ((cpuTicks(pid) ?? Number.NaN) - idleFrom) / 5;

    const timed = await fired(nc, stream, p, 'g');
    const base = Date.now() + 1_000;
    await schedule(nc, p, 't', 'g', TIMED, (i) => base + Math.floor((i * SPREAD_MS) / TIMED));
    await timed.until(TIMED, 60_000);
    timed.stop();

    // Due while the server is down: fired once it is back.
    const downBase = Date.now() + 500;
    await schedule(nc, p, 'd', 'h', DUE_WHILE_DOWN, (i) => downBase + i * 10);
    await nc.close();
    nc = undefined;
    await server.kill();
    await sleep(DOWN_MS);
    const restartFrom = performance.now();
    await server.restart();
    const restartMs = performance.now() - restartFrom;
    nc = await connect({ servers: server.url });
    const down = await fired(nc, stream, p, 'h');
    await down.until(DUE_WHILE_DOWN, 300_000);
    const downFiredMs = performance.now() - restartFrom;
    down.stop();
    return {
      publishedPerSec: Math.round(publishedPerSec),
      bytesPerSchedule: Math.round(bytesPerSchedule),
      idleCpuPercent,
      p50: percentile(timed.lateness, 50),
      p99: percentile(timed.lateness, 99),
      restartMs: Math.round(restartMs),
      downFiredMs: Math.round(downFiredMs),
    };
  } finally {
    await nc?.close();
    await server.dispose();
  }
}

/**
 * pending: JetStream message schedules at scale, the primitive the NATS store's due times are planned to
 * move to (packages/backend-nats/docs/nats-message-schedules.md). On a private file-backed NATS >= 2.12 server of its own: `count`
 * schedules due in an hour published 500 in flight (per second), the server's RSS growth per schedule,
 * its CPU while they wait (5 s), the lateness of 200 timers due over 2 s beside them (receive − due),
 * and after a SIGKILL with 50 timers due while it is down for 2 s: the time until it answers with
 * JetStream again, and until all 50 fired.
 */
export async function pendingWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 20_000 : 1_000_000;
  const subject = `NATS ${count.toLocaleString('en-US')} pending message schedules`;
  const samples = await alternate(ctx, [{ name: subject }], 'pending', () => round(count), FAILED);
  const results = samples.get(subject)!;
  const label = (what: string) => `${count.toLocaleString('en-US')} pending: ${what}`;
  const metrics: [string, keyof Result, string, 'higher' | 'lower'][] = [
    [label('published per second (500 in flight)'), 'publishedPerSec', 'schedules/s', 'higher'],
    [label('server RSS per pending schedule'), 'bytesPerSchedule', 'bytes', 'lower'],
    [label('server CPU while they wait'), 'idleCpuPercent', '% of a core', 'lower'],
    [label(`lateness p50 of ${TIMED} timers over ${SPREAD_MS / 1000} s`), 'p50', 'ms', 'lower'],
    [label(`lateness p99 of ${TIMED} timers over ${SPREAD_MS / 1000} s`), 'p99', 'ms', 'lower'],
    [label('restart after SIGKILL until JetStream answers'), 'restartMs', 'ms', 'lower'],
    [label(`restart until all ${DUE_WHILE_DOWN} timers due while down fired`), 'downFiredMs', 'ms', 'lower'],
  ];
  return metrics.map(([metric, key, unit, better]) =>
    soloRow(
      'pending',
      metric,
      unit,
      better,
      subject,
      results.map((r) => r[key]),
    ),
  );
}
