import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { JetStreamScheduler } from '../../src/jetstream-scheduler/index.js';
import { Collector } from './collector.js';
import { connectRequired, Harness, OLD_URL, waitFor } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/pump-process.ts', import.meta.url));

interface PumpChild {
  process: ChildProcess;
  output: string;
}

function startPump(url: string, prefix: string): PumpChild {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', FIXTURE, url, prefix], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const handle: PumpChild = { process: child, output: '' };
  child.stdout?.on('data', (chunk: Buffer) => {
    handle.output += chunk.toString();
  });
  return handle;
}

/** Every fired message, grouped by firedId: the stream sequences that carried it. */
function sequencesById(c: Collector): Map<string, Set<number>> {
  const map = new Map<string, Set<number>>();
  for (const call of c.calls) {
    const set = map.get(call.firedId) ?? new Set<number>();
    set.add(call.info.streamSequence);
    map.set(call.firedId, set);
  }
  return map;
}

describe('JetStream scheduler, emulated pump across crashes (NATS 2.9)', () => {
  let nc: NatsConnection;
  let harness: Harness;
  const children: PumpChild[] = [];
  let collector: Collector | undefined;

  beforeAll(async () => {
    nc = await connectRequired(OLD_URL);
    harness = new Harness(nc);
  });
  afterEach(async () => {
    for (const child of children.splice(0)) child.process.kill('SIGKILL');
    await collector?.stop();
    await harness.cleanup();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('a SIGKILLed pump is replaced by another process: nothing lost, nothing fired twice', async () => {
    // This process only schedules and consumes; two child processes compete for the pump.
    const scheduler: JetStreamScheduler = harness.scheduler({ mode: 'emulated', pump: false });
    const info = await scheduler.ensureStream();
    collector = await Collector.start(scheduler, 'crash', 5, () => undefined, { concurrency: 8 });
    const first = startPump(OLD_URL, info.prefix);
    children.push(first);
    await waitFor('the first pump to lead', () => first.output.includes('leader'), 20_000);
    const second = startPump(OLD_URL, info.prefix);
    children.push(second);
    await waitFor('the second pump to start', () => second.output.includes('ready'), 20_000);

    const count = 300;
    const start = Date.now();
    const expected: string[] = [];
    for (let i = 0; i < count; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: 50 }, (_, j) =>
          scheduler.at(`job/${i + j}`, new Date(start + 200 + (i + j) * 10), i + j),
        ),
      );
      expected.push(...batch.map((t) => `once:${t.timer}`));
    }
    await scheduler.cron('tick', 'tick', '* * * * * *', 'tick');

    await waitFor('some timers to fire', () => collector && collector.calls.length >= 50, 20_000);
    first.process.kill('SIGKILL');
    await waitFor('the second pump to take over', () => second.output.includes('leader'), 20_000);
    await waitFor(
      'every timer to fire',
      () => expected.every((id) => sequencesById(collector as Collector).has(id)),
      30_000,
    );
    const ticksBefore = [...sequencesById(collector).keys()].filter((id) => id.startsWith('cron:')).length;
    await waitFor(
      'cron ticks after the takeover',
      () =>
        [...sequencesById(collector as Collector).keys()].filter((id) => id.startsWith('cron:')).length >=
        ticksBefore + 2,
      20_000,
    );

    const byId = sequencesById(collector);
    for (const id of expected) expect(byId.get(id)?.size, id).toBe(1);
    for (const [id, seqs] of byId) expect(seqs.size, `${id} fired ${seqs.size} times`).toBe(1);
    const jsm = await jetstreamManager(nc);
    const left = await jsm.streams.getMessage(scheduler.stream, {
      last_by_subj: `${info.prefix}.sched.once.*.*`,
    });
    expect(left).toBeNull();
  });

  it('a fire published before a crash is not repeated when the next pump finds the definition again', async () => {
    // The state a pump leaves when it dies between publishing a fire and deleting the definition: the
    // fire is in the stream (with the pump's dedup id) and the definition is still there.
    const writer = harness.scheduler({ mode: 'emulated', pump: false });
    const info = await writer.ensureStream();
    const timer = await writer.at('crash/window', new Date(Date.now() - 1_000), 'once');
    const h = headers();
    h.set('Duetime-Timer', timer.timer);
    h.set('Duetime-Due', String(timer.due.getTime()));
    await jetstream(nc).publish(writer.fireSubject('crash/window'), JSON.stringify('once'), {
      headers: h,
      msgID: `o:${timer.timer}@${timer.due.getTime()}`,
    });

    const pump = harness.scheduler({ prefix: info.prefix, mode: 'emulated' });
    await pump.ensureStream();
    const jsm = await jetstreamManager(nc);
    await waitFor('the pump to reach the definition', async () => {
      return (await jsm.streams.getMessage(writer.stream, { seq: timer.sequence })) === null;
    });
    expect(pump.pumpFiredCount).toBe(1); // it did publish again ...
    collector = await Collector.start(writer, 'crash-window');
    await waitFor('the fire', () => collector && collector.calls.length > 0);
    const state = await jsm.consumers.info(writer.stream, 'crash-window');
    expect(state.num_pending + collector.calls.length).toBe(1); // ... and the stream kept one fire
    expect(collector.calls[0]?.firedId).toBe(`once:${timer.timer}`);
  });
});
