/**
 * A quick probe of @duetime/backend-nats against a local server (not the shared benchmark suite):
 * schedules committed per second (one per transaction with 1 and 16 writers; 100 per transaction), due
 * messages processed per second by one dispatcher with a no-op processor (concurrency 1 and 16), and fire
 * lateness (delivery time minus deadline, p50/p99/max) for schedules spread over a few seconds.
 *
 *   cd bench && node --import tsx --conditions=source src/nats-probe.ts [--newer] [--quick]
 *
 * DUETIME_NATS_URL overrides the server (default nats://127.0.0.1:4222); `--newer` uses
 * DUETIME_NATS_NEW_URL (default nats://127.0.0.1:4223) instead. Uses a fresh prefix and deletes its streams
 * at the end.
 */
import { randomBytes } from 'node:crypto';
import { connectNats, createNatsBackend, deleteNatsBackendData } from '@duetime/backend-nats';
import { Dispatcher, type Message } from '@duetime/core';

const newer = process.argv.includes('--newer');
const quick = process.argv.includes('--quick');
const url = newer
  ? (process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223')
  : (process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222');
const prefix = `probe${randomBytes(4).toString('hex')}`;
const message: Message = { type: 'probe.tick', aggregateId: 'probe', data: { n: 1 } };
const HOUR = 3_600_000;
const scale = quick ? 0.2 : 1;
const n = (count: number) => Math.max(16, Math.round(count * scale));

const backend = await createNatsBackend({ servers: url }, { prefix });
const { store } = backend;
console.log(`NATS ${backend.server.version} at ${url}, prefix ${prefix}`);

async function timed(label: string, count: number, run: () => Promise<void>): Promise<void> {
  const started = performance.now();
  await run();
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `${label.padEnd(52)} ${Math.round(count / seconds)
      .toLocaleString('en')
      .padStart(8)} /s  (${count} in ${seconds.toFixed(2)} s)`,
  );
}

async function clearSchedules(): Promise<void> {
  for (;;) {
    const page = await store.pageSchedules({ limit: 1000 });
    if (page.items.length === 0) return;
    await store.transact(async (tx) => {
      for (const s of page.items) await tx.cancelSchedule(s.key);
    });
  }
}

async function insert(count: number, name: string, at: (i: number) => number): Promise<void> {
  for (let done = 0; done < count; done += 500) {
    await store.transact(async (tx) => {
      for (let i = done; i < Math.min(count, done + 500); i++)
        await tx.schedule(`${name}/${i}`, new Date(at(i)), message);
    });
  }
}

async function deliver(count: number, concurrency: number): Promise<void> {
  await clearSchedules();
  const start = Date.now() - count - 1000;
  await insert(count, `due${concurrency}`, (i) => start + i);
  const dispatcher = new Dispatcher({ store, concurrency, processor: async () => {} });
  const controller = new AbortController();
  await timed(`processed due, no-op processor, concurrency ${concurrency}`, count, async () => {
    const running = dispatcher.run(controller.signal);
    while (dispatcher.snapshot().delivered < count) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    await running;
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** Schedules `count` messages spread over `spreadMs` from 1 s ahead; a running dispatcher delivers them. */
async function lateness(count: number, spreadMs: number, concurrency: number): Promise<void> {
  await clearSchedules();
  const late: number[] = [];
  const dispatcher = new Dispatcher({
    store,
    concurrency,
    processor: async (_tx, _message, { schedule }) => {
      late.push(Date.now() - schedule.at.getTime());
    },
  });
  const controller = new AbortController();
  const running = dispatcher.run(controller.signal);
  const start = Date.now() + 1000;
  await insert(count, `late${concurrency}`, (i) => start + Math.floor((i * spreadMs) / count));
  while (dispatcher.snapshot().delivered < count) await new Promise((r) => setTimeout(r, 20));
  controller.abort();
  await running;
  const sorted = late.sort((a, b) => a - b);
  console.log(
    `fire lateness, ${count} over ${spreadMs / 1000} s, concurrency ${concurrency}`.padEnd(52),
    `p50 ${percentile(sorted, 50)} ms, p99 ${percentile(sorted, 99)} ms, max ${sorted.at(-1)} ms`,
  );
}

try {
  await timed('committed, 1 per transaction, 1 writer', n(1000), async () => {
    for (let i = 0; i < n(1000); i++)
      await store.transact((tx) => tx.schedule(`one/${i}`, new Date(Date.now() + HOUR), message));
  });
  await timed('committed, 1 per transaction, 16 writers', n(4000), async () => {
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (let i = 0; i < n(4000) / 16; i++)
          await store.transact((tx) => tx.schedule(`par/${w}/${i}`, new Date(Date.now() + HOUR), message));
      }),
    );
  });
  await timed('committed, 100 per transaction, 1 writer', n(20_000), async () => {
    for (let b = 0; b < n(20_000) / 100; b++)
      await store.transact(async (tx) => {
        for (let i = 0; i < 100; i++)
          await tx.schedule(`batch/${b}/${i}`, new Date(Date.now() + HOUR), message);
      });
  });
  await deliver(n(1000), 1);
  await deliver(n(3000), 16);
  await lateness(n(500), 5000, 4);
} finally {
  await backend.close();
  const nc = await connectNats(url);
  await deleteNatsBackendData(nc, prefix);
  await nc.close();
}
