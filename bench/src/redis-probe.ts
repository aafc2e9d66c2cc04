/**
 * A quick probe of @duetime/backend-redis against a local server (not the shared benchmark suite):
 * schedules committed per second (one per transaction, sequential and 16 writers; 100 per transaction),
 * due messages delivered per second by one dispatcher with a no-op processor (concurrency 1 and 16),
 * memory per pending schedule (MEMORY USAGE of the store's keys, and used_memory), and idle CPU (this
 * process and the Redis server) with 100,000 pending schedules. With `--bullmq`, also the memory of
 * BullMQ delayed jobs with the same payload, for reference.
 *
 *   cd bench && node --import tsx --conditions=source src/redis-probe.ts [--bullmq]
 *
 * DUETIME_REDIS_URL overrides the server (default redis://127.0.0.1:6379). Uses a fresh prefix and deletes
 * its keys at the end.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRedisBackend, KeySpace } from '@duetime/backend-redis';
import { Dispatcher, type Message } from '@duetime/core';
import { Redis } from 'ioredis';

const url = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `probe${randomBytes(4).toString('hex')}`;
const keys = new KeySpace(prefix);
const message: Message = { type: 'probe.tick', aggregateId: 'probe', data: { n: 1 } };
const HOUR = 3_600_000;

const admin = new Redis(url);
const backend = await createRedisBackend({ url }, { prefix });
const { store } = backend;

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

async function dropKeys(pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, found] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (found.length > 0) await admin.unlink(...found);
  } while (cursor !== '0');
}

async function clearSchedules(): Promise<void> {
  await admin.unlink(keys.schedules, keys.due, keys.at, keys.index);
}

async function insert(count: number, name: string, at: (i: number) => number): Promise<void> {
  for (let done = 0; done < count; done += 1000) {
    await store.transact(async (tx) => {
      for (let i = done; i < Math.min(count, done + 1000); i++)
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
  await timed(`delivered, no-op processor, concurrency ${concurrency}`, count, async () => {
    const running = dispatcher.run(controller.signal);
    while (dispatcher.snapshot().delivered < count) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    await running;
  });
}

async function usedMemory(): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
}

async function memoryUsage(names: string[]): Promise<number> {
  let total = 0;
  for (const name of names) total += Number((await admin.memory('USAGE', name, 'SAMPLES', '0')) ?? 0);
  return total;
}

/** Calls and microseconds the server spent in EVALSHA so far, for all its clients. */
async function scriptStats(): Promise<{ calls: number; usec: number }> {
  const line = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(await admin.info('commandstats'));
  return { calls: Number(line?.[1] ?? 0), usec: Number(line?.[2] ?? 0) };
}

/** CPU seconds used so far by the Redis server process (same machine only). */
async function serverCpuSeconds(): Promise<number | undefined> {
  const pid = /process_id:(\d+)/.exec(await admin.info('server'))?.[1];
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

async function bullmqMemory(count: number): Promise<void> {
  const { Queue } = await import('bullmq');
  const name = `probe-bull-${randomBytes(4).toString('hex')}`;
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const before = await usedMemory();
  for (let done = 0; done < count; done += 1000) {
    await queue.addBulk(
      Array.from({ length: Math.min(1000, count - done) }, (_, i) => ({
        name: message.type,
        data: message,
        opts: { delay: HOUR, jobId: `k/${done + i}`, removeOnComplete: true },
      })),
    );
  }
  const after = await usedMemory();
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await admin.scan(cursor, 'MATCH', `bull:${name}:*`, 'COUNT', 1000);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  const usage = await memoryUsage(found);
  console.log(
    `BullMQ delayed job memory: ${(usage / count).toFixed(0)} B/job by MEMORY USAGE, ${((after - before) / count).toFixed(0)} B/job by used_memory`,
  );
  await queue.obliterate({ force: true });
  await queue.close();
  connection.disconnect();
}

try {
  await timed('committed, 1 per transaction, 1 writer', 3000, async () => {
    for (let i = 0; i < 3000; i++)
      await store.transact((tx) => tx.schedule(`one/${i}`, new Date(Date.now() + HOUR), message));
  });
  await timed('committed, 1 per transaction, 16 writers', 16_000, async () => {
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (let i = 0; i < 1000; i++)
          await store.transact((tx) => tx.schedule(`par/${w}/${i}`, new Date(Date.now() + HOUR), message));
      }),
    );
  });
  await timed('committed, 100 per transaction, 1 writer', 50_000, async () => {
    for (let b = 0; b < 500; b++)
      await store.transact(async (tx) => {
        for (let i = 0; i < 100; i++)
          await tx.schedule(`batch/${b}/${i}`, new Date(Date.now() + HOUR), message);
      });
  });
  await deliver(3000, 1);
  await deliver(10_000, 16);

  await clearSchedules();
  await dropKeys(`${keys.base.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}tx:*`);
  const pending = 100_000;
  const before = await usedMemory();
  const base = Date.now() + HOUR;
  await insert(pending, 'order/ORD-0000000/expire', (i) => base + i * 10);
  await dropKeys(`${keys.base.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}tx:*`);
  const after = await usedMemory();
  const usage = await memoryUsage([keys.schedules, keys.due, keys.at, keys.index]);
  console.log(
    `memory per pending schedule: ${(usage / pending).toFixed(0)} B by MEMORY USAGE, ${((after - before) / pending).toFixed(0)} B by used_memory (key ~34 B, message ${JSON.stringify(message).length} B)`,
  );

  const dispatcher = new Dispatcher({ store, processor: async () => {} });
  const controller = new AbortController();
  const running = dispatcher.run(controller.signal);
  await new Promise((r) => setTimeout(r, 2000));
  const seconds = 20;
  const cpuBefore = process.cpuUsage();
  const serverBefore = await serverCpuSeconds();
  const scriptsBefore = await scriptStats();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const cpu = process.cpuUsage(cpuBefore);
  const serverAfter = await serverCpuSeconds();
  const scriptsAfter = await scriptStats();
  controller.abort();
  await running;
  const own = (cpu.user + cpu.system) / 1e6 / seconds;
  const server =
    serverBefore === undefined || serverAfter === undefined
      ? undefined
      : (serverAfter - serverBefore) / seconds;
  const calls = (scriptsAfter.calls - scriptsBefore.calls) / seconds;
  const usec = (scriptsAfter.usec - scriptsBefore.usec) / seconds;
  console.log(
    `idle with ${pending.toLocaleString('en')} pending: this process ${(own * 100).toFixed(2)}% of a core` +
      (server === undefined ? '' : `, redis-server ${(server * 100).toFixed(2)}% (all its clients)`) +
      `; EVALSHA on the server (all clients): ${calls.toFixed(1)} calls/s, ${usec.toFixed(0)} µs/s`,
  );
  if (process.argv.includes('--bullmq')) await bullmqMemory(pending);
} finally {
  await backend.close();
  await dropKeys(keys.pattern);
  admin.disconnect();
}
