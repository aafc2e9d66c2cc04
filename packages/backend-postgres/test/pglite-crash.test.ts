import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Dispatcher, type SqlExecutor } from '@duetime/core';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';

const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const worker = fileURLToPath(new URL('./fixtures/pglite-worker.ts', import.meta.url));
const dataDir = mkdtempSync(join(tmpdir(), 'duetime-pglite-'));
const schema = 'crash';

afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** Opens the database in `dataDir` and a backend on it, runs `fn`, closes both. */
async function withStore<T>(
  fn: (db: PGlite, backend: Awaited<ReturnType<typeof createPostgresBackend>>) => Promise<T>,
): Promise<T> {
  const db = await PGlite.create(dataDir);
  try {
    const backend = await createPostgresBackend({ pglite: db }, { schema, claimTimeoutMs: 500 });
    try {
      return await fn(db, backend);
    } finally {
      await backend.close();
    }
  } finally {
    await db.close();
  }
}

const rows = async (db: PGlite, prefix: string) =>
  (
    await db.query<{ id: string }>(
      `SELECT id FROM "${schema}".app_rows WHERE starts_with(id, $1) ORDER BY id`,
      [prefix],
    )
  ).rows.map((r) => r.id);

it('a process SIGKILLed inside a processor on PGlite’s data directory commits nothing of its batch; reopened, every schedule is delivered once, the crash counted', async () => {
  const crash = Array.from({ length: 6 }, (_, i) => `crash/${i}`);
  // Before the crash: the application's row and its schedule committed together in its own transaction,
  // and six due schedules.
  await withStore(async (db, backend) => {
    await db.exec(`CREATE TABLE "${schema}".app_rows (id text PRIMARY KEY)`);
    await db.transaction(async (tx) => {
      await tx.query(`INSERT INTO "${schema}".app_rows (id) VALUES ('order/1')`);
      // The application's PGlite transaction as an executor (what @duetime/bindings/pglite's fromPglite does).
      const executor: SqlExecutor = {
        query: async (text, params = []) => {
          const r = await tx.query<Record<string, unknown>>(text, params as unknown[]);
          return { rows: r.rows, rowCount: r.affectedRows ?? r.rows.length };
        },
      };
      await backend.store.join(executor, (t) =>
        t.schedule('order/1/expire', new Date(Date.now() + 3_600_000), { type: 'expire' }),
      );
    });
    await backend.store.transact(async (tx) => {
      for (const [i, key] of crash.entries())
        await tx.schedule(key, new Date(Date.now() - 1000 + i), { type: 'effect' });
    });
  });

  const child = spawn(process.execPath, ['--import', tsx, '--conditions=source', worker, dataDir, schema], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    err = (err + c).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 60_000;
  while (!out.includes('IN_PROCESSOR crash/3')) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`the worker never reached the processor of crash/3; stderr: ${err}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  child.kill('SIGKILL');
  await exited;
  expect(child.signalCode).toBe('SIGKILL');

  await withStore(async (db, backend) => {
    // Nothing of the killed batch: no row of the three processors that had written, every schedule pending.
    expect(await rows(db, 'crash/')).toEqual([]);
    expect((await backend.store.listSchedules()).map((s) => s.key).sort()).toEqual(
      ['order/1/expire', ...crash].sort(),
    );
    // What committed before the crash is there.
    expect(await rows(db, 'order/')).toEqual(['order/1']);
    const attempts = new Map<string, number>();
    const dispatcher = new Dispatcher({
      store: backend.store,
      rescanInterval: 50,
      processor: async (tx, _message, { schedule }) => {
        attempts.set(schedule.key, schedule.attempts);
        await tx.sql.query(`INSERT INTO "${schema}".app_rows (id) VALUES ($1)`, [schedule.key]);
      },
    });
    const running = dispatcher.run();
    const until = Date.now() + 30_000;
    while ((await backend.store.countSchedules({ prefix: 'crash/' })) > 0 && Date.now() < until)
      await new Promise((r) => setTimeout(r, 50));
    await dispatcher.drain();
    await running;
    // Each row once; each schedule the killed process held came back as one failed attempt.
    expect(await rows(db, 'crash/')).toEqual(crash);
    expect(Object.fromEntries(attempts)).toEqual(Object.fromEntries(crash.map((k) => [k, 1])));
  });
}, 120_000);
