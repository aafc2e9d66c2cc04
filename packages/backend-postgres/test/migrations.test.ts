import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { freshNamespace } from '@duetime/conformance';
import { BackendError, NotSupportedError } from '@duetime/core';
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

  it('upgrades a schema left at an older version', async () => {
    const name = schema();
    await migrate({ connectionString: url }, { schema: name });
    await admin.query(`DROP TABLE "${name}".leases, "${name}".cursors`);
    await admin.query(`DELETE FROM "${name}".migrations WHERE id = 2`);
    expect(await migrate({ connectionString: url }, { schema: name })).toEqual({
      from: 1,
      to: SCHEMA_VERSION,
    });
    const backend = await createPostgresBackend({ connectionString: url }, { schema: name, migrate: false });
    expect(await backend.leases.acquire('k', 'o', 1000)).toEqual({ token: 1 });
    await backend.close();
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

  it('with migrate: false, refuses a schema that is not migrated and opens one that is', async () => {
    const name = schema();
    const error = await createPostgresBackend(
      { connectionString: url },
      { schema: name, migrate: false },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BackendError);
    expect((error as Error).message).toMatch(/at version 0.*run migrate\(\)/);
    const exists = await admin.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [name]);
    expect(exists.rowCount).toBe(0);
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
