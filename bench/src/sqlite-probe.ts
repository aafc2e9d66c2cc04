/**
 * A quick probe of @duetime/backend-sqlite (not the shared benchmark suite): schedules committed per second
 * (one per transaction, 100 per transaction), due messages delivered per second by one dispatcher with a
 * no-op processor, and the RSS of a dispatcher process watching 1,000,000 schedules that are not yet due.
 *
 *   cd bench && node --import tsx --conditions=source src/sqlite-probe.ts [--pending 1000000]
 *
 * Works in a temporary directory it removes at the end.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { Dispatcher, type Message } from '@duetime/core';

const message: Message = { type: 'probe.tick', aggregateId: 'probe', data: { n: 1 } };
const HOUR = 3_600_000;
const args = process.argv.slice(2);

async function timed(label: string, count: number, run: () => Promise<void>): Promise<void> {
  const started = performance.now();
  await run();
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `${label.padEnd(58)} ${Math.round(count / seconds)
      .toLocaleString('en')
      .padStart(8)} /s  (${count} in ${seconds.toFixed(2)} s)`,
  );
}

/** The child mode: open the file, run a dispatcher for a while, print its RSS. */
async function dispatcherRss(file: string): Promise<void> {
  const backend = await createSqliteBackend({ filename: file });
  const dispatcher = new Dispatcher({ store: backend.store, concurrency: 16, processor: () => {} });
  const stop = new AbortController();
  const running = dispatcher.run(stop.signal);
  const samples: number[] = [];
  for (let i = 0; i < 10; i++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    samples.push(process.memoryUsage().rss);
  }
  stop.abort();
  await running;
  await backend.close();
  console.log(
    JSON.stringify({
      rssMb: Math.round(Math.max(...samples) / 1048576),
      heapMb: Math.round(process.memoryUsage().heapUsed / 1048576),
    }),
  );
}

async function probe(): Promise<void> {
  const pendingIndex = args.indexOf('--pending');
  const pending = pendingIndex >= 0 ? Number(args[pendingIndex + 1]) : 1_000_000;
  const dir = mkdtempSync(join(tmpdir(), 'duetime-sqlite-probe-'));
  try {
    for (const synchronous of ['full', 'normal'] as const) {
      const backend = await createSqliteBackend(
        { filename: join(dir, `commits-${synchronous}.db`) },
        { synchronous },
      );
      const { store } = backend;
      const at = new Date(Date.now() + HOUR);
      await timed(`schedules committed, 1 per transaction (synchronous=${synchronous})`, 2000, async () => {
        for (let i = 0; i < 2000; i++) await store.transact((tx) => tx.schedule(`one/${i}`, at, message));
      });
      await timed(`schedules committed, 16 writers (synchronous=${synchronous})`, 2000, async () => {
        await Promise.all(
          Array.from({ length: 16 }, (_, w) =>
            (async () => {
              for (let i = w; i < 2000; i += 16)
                await store.transact((tx) => tx.schedule(`par/${i}`, at, message));
            })(),
          ),
        );
      });
      await timed(
        `schedules committed, 100 per transaction (synchronous=${synchronous})`,
        50_000,
        async () => {
          for (let b = 0; b < 500; b++)
            await store.transact(async (tx) => {
              for (let i = b * 100; i < b * 100 + 100; i++) await tx.schedule(`batch/${i}`, at, message);
            });
        },
      );
      for (const concurrency of [1, 16]) {
        const due = 5000;
        const past = Date.now() - due - 1000;
        for (let b = 0; b < due; b += 1000)
          await store.transact(async (tx) => {
            for (let i = b; i < b + 1000; i++)
              await tx.schedule(`due${concurrency}/${i}`, new Date(past + i), message);
          });
        const dispatcher = new Dispatcher({ store, concurrency, processor: () => {} });
        const stop = new AbortController();
        await timed(
          `due messages delivered, no-op processor, concurrency ${concurrency} (${synchronous})`,
          due,
          async () => {
            const running = dispatcher.run(stop.signal);
            while ((await store.pageSchedules({ prefix: `due${concurrency}/`, limit: 1 })).items.length > 0)
              await new Promise((resolve) => setTimeout(resolve, 20));
            stop.abort();
            await running;
          },
        );
      }
      await backend.close();
    }

    const file = join(dir, 'pending.db');
    const backend = await createSqliteBackend({ filename: file }, { synchronous: 'normal' });
    const base = Date.now() + 24 * HOUR;
    await timed(
      `insert ${pending.toLocaleString('en')} pending schedules (10,000 per transaction)`,
      pending,
      async () => {
        for (let b = 0; b < pending; b += 10_000)
          await backend.store.transact(async (tx) => {
            for (let i = b; i < Math.min(pending, b + 10_000); i++)
              await tx.schedule(`pending/${i}`, new Date(base + i * 10), message);
          });
      },
    );
    await backend.close();
    const child = spawn(
      process.execPath,
      [
        '--import',
        pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href,
        '--conditions=source',
        fileURLToPath(import.meta.url),
        '--dispatcher-rss',
        file,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    await new Promise((resolve) => child.once('exit', resolve));
    const { rssMb, heapMb } = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as {
      rssMb: number;
      heapMb: number;
    };
    console.log(
      `dispatcher RSS with ${pending.toLocaleString('en')} pending schedules: ${rssMb} MB (heap ${heapMb} MB)`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const rssIndex = args.indexOf('--dispatcher-rss');
if (rssIndex >= 0) await dispatcherRss(args[rssIndex + 1] ?? '');
else await probe();
