import { freshNamespace, waitFor } from '@duetime/conformance';
import { Dispatcher, InvalidArgumentError, silentLogger } from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';
import { dropSchemas, open, PG_URL, schemaFor, urlWithUser } from './adapter.js';

afterAll(dropSchemas);

/** A backend (pipelining or not) with `count` due schedules and an application table `rows` beside them. */
async function withDue(count: number, pipeline: boolean) {
  const namespace = freshNamespace();
  const backend = await open(namespace, { pipeline });
  const table = `"${schemaFor(namespace)}".rows`;
  await backend.store.transact(async (tx) => {
    await tx.sql.query(`CREATE TABLE ${table} (id text PRIMARY KEY)`);
    for (let i = 0; i < count; i++)
      await tx.schedule(`p/${i}`, new Date(Date.now() - 1000 + i), { type: 'write', data: { i } });
  });
  const rows = async () =>
    (await backend.store.transact((tx) => tx.sql.query<{ id: string }>(`SELECT id FROM ${table}`))).rows.map(
      (r) => r.id,
    );
  return { backend, table, rows };
}

/** Runs processors of one dispatcher and counts how many ran at once at most. */
function counted(write: (sql: pg.PoolClient, key: string) => Promise<unknown>) {
  const state = { running: 0, most: 0, runs: new Map<string, number>() };
  const processor = async (
    tx: { sql: pg.PoolClient },
    _m: unknown,
    { schedule }: { schedule: { key: string } },
  ) => {
    state.runs.set(schedule.key, (state.runs.get(schedule.key) ?? 0) + 1);
    state.running++;
    state.most = Math.max(state.most, state.running);
    try {
      await write(tx.sql, schedule.key);
    } finally {
      state.running--;
    }
  };
  return { state, processor };
}

describe('Dispatcher pipeline: true on PostgreSQL', () => {
  it('runs a batch’s processors at once on a pipelining pool, each write committed once with its consumption', async () => {
    const { backend, table, rows } = await withDue(16, true);
    const { state, processor } = counted((sql, key) => sql.query(`INSERT INTO ${table} VALUES ($1)`, [key]));
    const dispatcher = new Dispatcher({ store: backend.store, pipeline: true, batchSize: 16, processor });
    const run = dispatcher.run();
    await waitFor('16 deliveries', () => dispatcher.snapshot().delivered >= 16);
    await dispatcher.drain();
    await run;
    expect(state.most).toBe(16);
    expect((await rows()).sort()).toEqual(Array.from({ length: 16 }, (_, i) => `p/${i}`).sort());
    expect(await backend.store.listSchedules(new Date(Date.now() + 60_000))).toEqual([]);
    await backend.close();
  });

  it('undoes the group when a processor caught its own failed statement, then runs them one by one', async () => {
    const { backend, table, rows } = await withDue(8, true);
    const { state, processor } = counted(async (sql, key) => {
      await sql.query(`INSERT INTO ${table} VALUES ($1)`, [key]);
      // A duplicate key: the statement fails and aborts the transaction; the processor swallows it.
      if (key === 'p/3') await sql.query(`INSERT INTO ${table} VALUES ($1)`, [key]).catch(() => {});
    });
    const dispatcher = new Dispatcher({
      store: backend.store,
      pipeline: true,
      batchSize: 8,
      // One batch, however slow a loaded machine makes the run one by one after the group's failure.
      batchDuration: 600_000,
      retryDelay: 3_600_000,
      logger: silentLogger,
      processor,
    });
    const run = dispatcher.run();
    await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
    await dispatcher.drain();
    await run;
    expect(dispatcher.snapshot()).toMatchObject({ batches: 1, delivered: 7, failed: 1 });
    // Each ran in the group and again alone; only p/3's part was undone in the end.
    for (let i = 0; i < 8; i++) expect(state.runs.get(`p/${i}`), `runs of p/${i}`).toBe(2);
    expect((await rows()).sort()).toEqual([0, 1, 2, 4, 5, 6, 7].map((i) => `p/${i}`).sort());
    const failed = await backend.store.loadSchedule('p/3');
    expect(failed?.attempts).toBe(1);
    expect(failed?.lastError).toMatch(/aborted/);
    await backend.close();
  });

  it('runs processors one by one on a pool that does not pipeline (no statement sent while one waits)', async () => {
    const { backend, table, rows } = await withDue(6, false);
    const { state, processor } = counted((sql, key) => sql.query(`INSERT INTO ${table} VALUES ($1)`, [key]));
    const dispatcher = new Dispatcher({ store: backend.store, pipeline: true, batchSize: 6, processor });
    const run = dispatcher.run();
    await waitFor('6 deliveries', () => dispatcher.snapshot().delivered >= 6);
    await dispatcher.drain();
    await run;
    expect(state.most).toBe(1);
    expect(await rows()).toHaveLength(6);
    await backend.close();
  });

  it('refuses pipeline: true for an application pool that does not pipeline, and a pipeline that is no boolean', async () => {
    const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 1 });
    try {
      const refused = await createPostgresBackend({ pool }, { pipeline: true }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).field).toBe('options.pipeline');
      const bad = await createPostgresBackend(
        { connectionString: PG_URL },
        { pipeline: 'yes' as unknown as boolean },
      ).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(InvalidArgumentError);
      expect((bad as InvalidArgumentError).message).toContain('pipeline');
    } finally {
      await pool.end();
    }
  });
});
