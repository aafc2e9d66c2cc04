import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { effects, freshNamespace, waitFor } from '@duetime/conformance';
import {
  BackendError,
  Dispatcher,
  interval,
  NotFoundError,
  NotSupportedError,
  recurring,
  UnrecoverableError,
} from '@duetime/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type MigrationResult,
  migrate,
  migrations,
  SCHEMA_VERSION,
} from '../src/index.js';
import { adminClient, PG_URL, urlWithUser } from './adapter.js';

const url = urlWithUser(PG_URL);
const childScript = fileURLToPath(new URL('./fixtures/migrate-child.ts', import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
let admin: pg.Client;
const schemas: string[] = [];

function schema(): string {
  const name = freshNamespace();
  schemas.push(name);
  return name;
}

function runChild(name: string, startAt: number): Promise<MigrationResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', tsx, '--conditions=source', childScript, url, name, String(startAt)],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    child.on('exit', (code) =>
      code === 0
        ? resolve(JSON.parse(out.trim()) as MigrationResult)
        : reject(new Error(`child exited ${code}: ${err}`)),
    );
  });
}

/** Builds `name` as this package's migrations up to `version` left it (what an older release created). */
async function schemaAt(name: string, version: number): Promise<void> {
  const s = `"${name}"`;
  await admin.query(`CREATE SCHEMA ${s}`);
  await admin.query(`CREATE TABLE ${s}.migrations (
    id integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  )`);
  for (const m of migrations.slice(0, version)) {
    await admin.query(m.sql.replaceAll(':SCHEMA', s));
    await admin.query(`INSERT INTO ${s}.migrations (id, name) VALUES ($1, $2)`, [m.id, m.name]);
  }
}

async function versions(name: string): Promise<number[]> {
  const result = await admin.query(`SELECT id FROM "${name}".migrations ORDER BY id`);
  return result.rows.map((r) => r.id as number);
}

beforeAll(async () => {
  admin = await adminClient();
});

afterAll(async () => {
  for (const name of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
  await admin.end();
});

describe('migrations', () => {
  it('numbers its migrations 1..n, each with a name and a schema placeholder', () => {
    expect(migrations.map((m) => m.id)).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1));
    for (const m of migrations) {
      expect(m.name).toMatch(/^[a-z-]+$/);
      expect(m.sql).toContain(':SCHEMA.');
    }
  });

  it('migrates a fresh schema once; running again changes nothing', async () => {
    const name = schema();
    expect(await migrate({ connectionString: url }, { schema: name })).toEqual({
      from: 0,
      to: SCHEMA_VERSION,
    });
    expect(await migrate({ connectionString: url }, { schema: name })).toEqual({
      from: SCHEMA_VERSION,
      to: SCHEMA_VERSION,
    });
    expect(await versions(name)).toEqual(migrations.map((m) => m.id));
  });

  it('is safe when several processes and pools migrate the same schema at once: each migration runs once', async () => {
    const name = schema();
    const startAt = Date.now() + 2_500;
    const pools = Array.from({ length: 4 }, () => new pg.Pool({ connectionString: url, max: 2 }));
    try {
      const inProcess = pools.map(async (pool) => {
        await new Promise((resolve) => setTimeout(resolve, startAt - Date.now()));
        return migrate({ pool }, { schema: name });
      });
      const children = [1, 2, 3].map(() => runChild(name, startAt));
      const results = await Promise.all([...inProcess, ...children]);
      expect(results.every((r) => r.to === SCHEMA_VERSION)).toBe(true);
      expect(results.filter((r) => r.from === 0)).toHaveLength(1);
      expect(results.filter((r) => r.from === SCHEMA_VERSION)).toHaveLength(results.length - 1);
      expect(await versions(name)).toEqual(migrations.map((m) => m.id));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  }, 60_000);

  it('upgrades a schema left at version 1', async () => {
    const name = schema();
    await schemaAt(name, 1);
    expect(await migrate({ connectionString: url }, { schema: name })).toEqual({
      from: 1,
      to: SCHEMA_VERSION,
    });
    const backend = await createPostgresBackend({ connectionString: url }, { schema: name, migrate: false });
    expect(await backend.leases.acquire('k', 'o', 1000)).toEqual({ token: 1 });
    await backend.close();
  });

  it('upgrades a schema at version 2 holding rows: they keep their values and are still delivered', async () => {
    const name = schema();
    await schemaAt(name, 2);
    const s = `"${name}"`;
    const past = Date.now() - 60_000;
    const later = Date.now() + 3_600_000;
    // Rows as version 2 wrote them: two due schedules (one after a failed attempt), one later, an event.
    await admin.query(`SELECT setval('${s}.schedule_versions', 10)`);
    await admin.query(
      `INSERT INTO ${s}.schedules (key, at, due_at, version, attempts, message, last_error) VALUES
        ('old/due', to_timestamp($1 / 1000.0), to_timestamp($1 / 1000.0), 3, 0, '{"type":"old","aggregateId":"a1"}', NULL),
        ('old/failed', to_timestamp($1 / 1000.0), to_timestamp($1 / 1000.0), 5, 2, '{"type":"old","aggregateId":"a2","data":{"n":1}}', 'Error: once'),
        ('old/later', to_timestamp($2 / 1000.0), to_timestamp($2 / 1000.0), 7, 0, '{"type":"old","aggregateId":"a3"}', NULL)`,
      [past, later],
    );
    await admin.query(
      `INSERT INTO ${s}.events (aggregate_id, sequence, type, data, recorded_at) VALUES ('a1', 1, 'effect.applied', NULL, now())`,
    );

    expect(await migrate({ connectionString: url }, { schema: name })).toEqual({
      from: 2,
      to: SCHEMA_VERSION,
    });
    expect(await versions(name)).toEqual(migrations.map((m) => m.id));
    const backend = await createPostgresBackend({ connectionString: url }, { schema: name, migrate: false });
    try {
      const failed = await backend.store.loadSchedule('old/failed');
      expect(failed).toEqual({
        key: 'old/failed',
        at: new Date(past),
        dueAt: new Date(past),
        version: 5,
        attempts: 2,
        lastError: 'Error: once',
        message: { type: 'old', aggregateId: 'a2', data: { n: 1 } },
      });
      expect(failed && 'recurrence' in failed).toBe(false);
      expect((await backend.store.loadEvents('a1')).map((e) => e.sequence)).toEqual([1]);

      const delivered: string[] = [];
      const dispatcher = new Dispatcher({
        store: backend.store,
        rescanInterval: 100,
        processor: async (tx, message, { schedule }) => {
          if (schedule.key === 'old/failed') throw new UnrecoverableError('given up after the upgrade');
          await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
          delivered.push(schedule.key);
        },
      });
      const stop = new AbortController();
      const running = dispatcher.run(stop.signal);
      try {
        await waitFor(
          'the due rows to be delivered',
          () => dispatcher.snapshot().deadLettered === 1 && delivered.length === 1,
        );
      } finally {
        stop.abort();
        await running;
      }
      expect(delivered).toEqual(['old/due']);
      expect((await backend.store.loadEvents('a1')).map((e) => e.sequence)).toEqual([1, 2]);
      expect((await backend.store.listSchedules()).map((x) => x.key)).toEqual(['old/later']);
      expect(await backend.store.loadDeadLetter('old/failed')).toMatchObject({
        version: 5,
        attempts: 3,
        message: { type: 'old', aggregateId: 'a2', data: { n: 1 } },
      });
      // New schedules get versions after the old ones, and recurrences are stored.
      await backend.store.transact((tx) =>
        tx.schedule('new/every', recurring(interval(3_600_000)), { type: 'new' }),
      );
      const recurringSchedule = await backend.store.loadSchedule('new/every');
      expect(recurringSchedule?.version).toBeGreaterThan(10);
      expect(recurringSchedule?.recurrence).toBeDefined();
    } finally {
      await backend.close();
    }
  });

  it('refuses a schema migrated by a newer version, whichever way it is opened', async () => {
    const name = schema();
    await migrate({ connectionString: url }, { schema: name });
    await admin.query(`INSERT INTO "${name}".migrations (id, name) VALUES ($1, 'from-the-future')`, [
      SCHEMA_VERSION + 1,
    ]);
    for (const attempt of [
      () => migrate({ connectionString: url }, { schema: name }),
      () => createPostgresBackend({ connectionString: url }, { schema: name }),
      () => createPostgresBackend({ connectionString: url }, { schema: name, migrate: false }),
    ]) {
      const error = await attempt().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(NotSupportedError);
      expect((error as Error).message).toContain(`version ${SCHEMA_VERSION + 1}`);
      expect((error as Error).message).toContain(`schema "${name}"`);
    }
    expect(await versions(name)).toEqual([...migrations.map((m) => m.id), SCHEMA_VERSION + 1]);
  });

  it('with migrate: false, refuses a schema that is not there (creating nothing) and opens one that is', async () => {
    const name = schema();
    const error = await createPostgresBackend(
      { connectionString: url },
      { schema: name, migrate: false },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as NotFoundError).code).toBe('DUETIME_NOT_FOUND');
    expect((error as Error).message).toContain(`no duetime tables in schema "${name}"`);
    const exists = await admin.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [name]);
    expect(exists.rowCount).toBe(0);
    // An empty schema of that name (made by someone else) is not duetime's either, and stays empty.
    await admin.query(`CREATE SCHEMA "${name}"`);
    await expect(
      createPostgresBackend({ connectionString: url }, { schema: name, migrate: false }),
    ).rejects.toBeInstanceOf(NotFoundError);
    const tables = await admin.query('SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1', [
      name,
    ]);
    expect(tables.rows[0].n).toBe(0);
    await migrate({ connectionString: url }, { schema: name });
    const backend = await createPostgresBackend({ connectionString: url }, { schema: name, migrate: false });
    expect(await backend.store.listSchedules()).toEqual([]);
    await backend.close();
  });

  it('explains a schema that already holds a table of the same name that duetime did not create', async () => {
    const name = schema();
    await admin.query(`CREATE SCHEMA "${name}"`);
    await admin.query(`CREATE TABLE "${name}".schedules (id int)`);
    const error = await migrate({ connectionString: url }, { schema: name }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BackendError);
    expect((error as Error).message).toMatch(/did not create.*schema of its own/);
    const tables = await admin.query(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1`, [
      name,
    ]);
    expect(tables.rows[0].n).toBe(1); // nothing half-done: the failed migration rolled back entirely
  });
});
