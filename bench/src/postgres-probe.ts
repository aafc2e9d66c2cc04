/**
 * A quick probe of @duetime/backend-postgres against a local server (not the shared benchmark suite):
 * schedules committed per second (one per transaction, sequential and 16 writers; 100 per transaction),
 * due messages delivered per second by one dispatcher with a no-op processor (concurrency 1 and 16), and
 * idle CPU (this process and its PostgreSQL backends) with 100,000 pending schedules.
 *
 *   cd bench && node --import tsx --conditions=source src/postgres-probe.ts
 *
 * DUETIME_PG_URL overrides the server (default postgres://127.0.0.1:5432/test). Uses a fresh schema and
 * drops it at the end.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { createPostgresBackend } from '@duetime/backend-postgres';
import { Dispatcher, type Message } from '@duetime/core';

const url = withUser(process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test');
const schema = `probe_${randomBytes(4).toString('hex')}`;
const applicationName = `duetime-probe-${process.pid}`;
const message: Message = { type: 'probe.tick', aggregateId: 'probe', data: { n: 1 } };
const HOUR = 3_600_000;

function withUser(raw: string): string {
  const url = new URL(raw);
  if (!url.username && !process.env.PGUSER && !process.env.USER) url.username = userInfo().username;
  return url.toString();
}

const backend = await createPostgresBackend(
  { connectionString: url },
  { schema, poolSize: 20, applicationName },
);
const { store } = backend;

async function sql(text: string): Promise<unknown[]> {
  return store.transact(async (tx) => (await tx.sql.query(text)).rows);
}

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

async function insertDue(count: number, prefix: string, at: number): Promise<void> {
  for (let done = 0; done < count; done += 1000) {
    await store.transact(async (tx) => {
      for (let i = done; i < Math.min(count, done + 1000); i++)
        await tx.schedule(`${prefix}/${i}`, new Date(at + i), message);
    });
  }
}

async function deliver(count: number, concurrency: number): Promise<void> {
  await sql(`DELETE FROM "${schema}".schedules`);
  await insertDue(count, `due${concurrency}`, Date.now() - count - 1000);
  const dispatcher = new Dispatcher({ store, concurrency, processor: async () => {} });
  const controller = new AbortController();
  await timed(`delivered, no-op processor, concurrency ${concurrency}`, count, async () => {
    const running = dispatcher.run(controller.signal);
    while (dispatcher.snapshot().delivered < count) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    await running;
  });
}

/**
 * CPU time of the PostgreSQL backends serving this process (same machine only), sampled while `run`
 * runs: connections come and go (the pool closes idle ones), so each backend counts from when it was
 * first seen to when it was last seen.
 */
async function serverCpuSecondsDuring(
  ofApplication: string,
  run: () => Promise<void>,
): Promise<number | undefined> {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let readable = true;
  const sample = async () => {
    const rows = (await sql(
      `SELECT pid FROM pg_stat_activity WHERE application_name = '${ofApplication}'`,
    )) as { pid: number }[];
    for (const { pid } of rows) {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        const ticks = Number(fields[11]) + Number(fields[12]);
        if (!first.has(pid)) first.set(pid, ticks);
        last.set(pid, ticks);
      } catch {
        readable = false;
      }
    }
  };
  await sample();
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await new Promise((r) => setTimeout(r, 5000));
      await sample();
    }
  })();
  await run();
  sampling = false;
  await sampler;
  await sample();
  if (!readable) return undefined;
  let ticks = 0;
  for (const [pid, end] of last) ticks += end - (first.get(pid) ?? end);
  return ticks / 100;
}

try {
  await timed('committed, 1 per transaction, 1 writer', 2000, async () => {
    for (let i = 0; i < 2000; i++)
      await store.transact((tx) => tx.schedule(`one/${i}`, new Date(Date.now() + HOUR), message));
  });
  await timed('committed, 1 per transaction, 16 writers', 8000, async () => {
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (let i = 0; i < 500; i++)
          await store.transact((tx) => tx.schedule(`par/${w}/${i}`, new Date(Date.now() + HOUR), message));
      }),
    );
  });
  await timed('committed, 100 per transaction, 1 writer', 20_000, async () => {
    for (let b = 0; b < 200; b++)
      await store.transact(async (tx) => {
        for (let i = 0; i < 100; i++)
          await tx.schedule(`batch/${b}/${i}`, new Date(Date.now() + HOUR), message);
      });
  });
  await deliver(3000, 1);
  await deliver(10_000, 16);

  await sql(`DELETE FROM "${schema}".schedules`);
  await insertDue(100_000, 'idle', Date.now() + HOUR);
  await sql(`VACUUM ANALYZE "${schema}".schedules`).catch(() => {});
  // The idle dispatcher runs on a backend of its own, so that the probe's own queries (CPU sampling)
  // are not counted on the server side.
  const idleName = `${applicationName}-idle`;
  const idle = await createPostgresBackend({ connectionString: url }, { schema, applicationName: idleName });
  const dispatcher = new Dispatcher({ store: idle.store, processor: async () => {} });
  const controller = new AbortController();
  const running = dispatcher.run(controller.signal);
  await new Promise((r) => setTimeout(r, 2000));
  const seconds = 30;
  const cpuBefore = process.cpuUsage();
  const serverSeconds = await serverCpuSecondsDuring(
    idleName,
    () => new Promise((r) => setTimeout(r, seconds * 1000)),
  );
  const cpu = process.cpuUsage(cpuBefore);
  controller.abort();
  await running;
  await idle.close();
  const clientPct = ((cpu.user + cpu.system) / 1e6 / seconds) * 100;
  const serverPct = serverSeconds === undefined ? undefined : (serverSeconds / seconds) * 100;
  console.log(
    `${'idle CPU, 100,000 pending, 1 dispatcher (default 1 s rescan)'.padEnd(52)} client ${clientPct.toFixed(2)} %, server ${serverPct === undefined ? 'n/a' : `${serverPct.toFixed(2)} %`} of one core`,
  );
} finally {
  await sql(`DROP SCHEMA "${schema}" CASCADE`).catch((error) =>
    console.error('could not drop', schema, error),
  );
  await backend.close();
}
