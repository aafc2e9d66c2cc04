import { effects, freshNamespace, waitFor } from '@duetime/conformance';
import {
  type Backend,
  Dispatcher,
  type DispatcherOptions,
  interval,
  recurring,
  type Schedule,
} from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';
import { dropSchemas, PG_URL, schemaFor, urlWithUser } from './adapter.js';

const HOUR = 3_600_000;

afterAll(dropSchemas);

/**
 * A backend on a pool of the test's own whose clients record every message they send (one entry per
 * `client.query` call: one round trip each), with an application table next to duetime's.
 */
async function recorded() {
  const schema = schemaFor(freshNamespace());
  const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 6 });
  const sent: { client: pg.PoolClient; text: string }[] = [];
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const first = args[0] as string | { text?: string; name?: string };
      sent.push({
        client: client as pg.PoolClient,
        text: typeof first === 'string' ? first : (first.text ?? first.name ?? ''),
      });
      return query(...args);
    };
  });
  const backend = await createPostgresBackend({ pool }, { schema });
  await pool.query(`CREATE TABLE "${schema}".app_rows (id text PRIMARY KEY)`);
  const rows = async () =>
    (await pool.query(`SELECT id FROM "${schema}".app_rows ORDER BY id`)).rows.map((r) => r.id as string);
  return {
    schema,
    pool,
    backend,
    sent,
    rows,
    async close() {
      await backend.close();
      await pool.end();
    },
  };
}

/** Schedules `count` due schedules `<prefix><i>`, due one millisecond apart in key order. */
async function due(backend: Backend, count: number, prefix = 'd/') {
  await backend.store.transact(async (tx) => {
    for (let i = 0; i < count; i++)
      await tx.schedule(`${prefix}${i}`, new Date(Date.now() - 10_000 + i), {
        type: 't',
        aggregateId: `a${i}`,
      });
  });
}

/** What the delivery claimed after entry `from` sent on its connection, one entry per round trip. */
function sentByDelivery(sent: { client: pg.PoolClient; text: string }[], from: number): string[] {
  const since = sent.slice(from);
  const claim = since.find((s) => s.text.includes('WITH claimed AS'));
  if (!claim) throw new Error('no claim was sent');
  return since.filter((s) => s.client === claim.client).map((s) => s.text);
}

function run(backend: Backend<pg.PoolClient>, options: Partial<DispatcherOptions<never, pg.PoolClient>>) {
  const dispatcher = new Dispatcher<never, pg.PoolClient>({
    store: backend.store,
    rescanInterval: 100,
    retryDelay: HOUR,
    batchSize: 10,
    batchDuration: 600_000,
    processor: async () => {},
    ...options,
  });
  const stop = new AbortController();
  const done = dispatcher.run(stop.signal);
  return {
    dispatcher,
    async stop() {
      stop.abort();
      await done;
    },
  };
}

describe('delivery batches: round trips', () => {
  it('claims a page with one statement sent with BEGIN, and commits with one message, when processors issue no SQL', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 10);
      const from = t.sent.length;
      const tx = await t.backend.store.driver.deliver(new Date(), 10);
      expect(tx.claimed.map((s) => s.key)).toEqual(Array.from({ length: 10 }, (_, i) => `d/${i}`));
      for (const schedule of tx.claimed) {
        tx.savepoint(schedule.key);
        // A processor that only schedules: buffered, no SQL of its own.
        await tx.putSchedule(`next/${schedule.key}`, new Date(Date.now() + HOUR), schedule.message);
        await tx.releaseSavepoint();
      }
      expect(await tx.commit()).toEqual(new Map());
      const texts = sentByDelivery(t.sent, from);
      expect(texts).toHaveLength(2);
      expect(texts[0]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED; WITH claimed AS/);
      expect(texts[1]).toMatch(/INSERT INTO .*schedules.*COMMIT$/s);
      expect(texts.join('\n')).not.toContain('SAVEPOINT');
      expect(await t.backend.store.listSchedules(new Date())).toEqual([]);
      expect((await t.backend.store.listSchedules()).map((s) => s.key)).toHaveLength(10);
    } finally {
      await t.close();
    }
  });

  it('sends SAVEPOINT with a part’s first statement and its RELEASE in front of the next message', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 3);
      const from = t.sent.length;
      const tx = await t.backend.store.driver.deliver(new Date(), 10);
      for (const schedule of tx.claimed) {
        tx.savepoint(schedule.key);
        // Taking the client queues SAVEPOINT at once, ahead of the application's own statement.
        await tx.sql.query(`INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`, [schedule.key]);
        await tx.releaseSavepoint();
      }
      await tx.commit();
      const texts = sentByDelivery(t.sent, from);
      // The claim; per part its SAVEPOINT (after the previous part's RELEASE) and its INSERT; the commit.
      expect(texts).toHaveLength(1 + 3 * 2 + 1);
      expect(texts.filter((s) => s.startsWith('SAVEPOINT'))).toHaveLength(1);
      expect(texts.filter((s) => s.startsWith('RELEASE SAVEPOINT duetime_part; SAVEPOINT'))).toHaveLength(2);
      expect(texts.at(-1)).toBe('RELEASE SAVEPOINT duetime_part; COMMIT');
      expect(await t.rows()).toEqual(['d/0', 'd/1', 'd/2']);
    } finally {
      await t.close();
    }
  });

  it('sends the put-backs, re-arms and dead letters of a batch as one statement each, with the COMMIT', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 6);
      await t.backend.store.transact((tx) => tx.schedule('rec/0', recurring(interval(HOUR)), { type: 'r' }));
      const from = t.sent.length;
      // Claims as if two hours later: the recurrence's first occurrence is due then.
      const tx = await t.backend.store.driver.deliver(new Date(Date.now() + 2 * HOUR), 10);
      const failure = (s: Schedule) => ({
        attempts: 1,
        dueAt: new Date(Date.now() + HOUR),
        error: `no ${s.key}`,
      });
      for (const schedule of tx.claimed) {
        if (schedule.recurrence) await tx.rearm(schedule, new Date(Date.now() + HOUR), schedule.recurrence);
        else if (schedule.key < 'd/3') await tx.restore(schedule, failure(schedule));
        else await tx.deadLetter(schedule, { attempts: 5, error: 'gave up', deadAt: new Date() });
      }
      await tx.commit();
      const texts = sentByDelivery(t.sent, from);
      expect(texts).toHaveLength(2);
      const commit = texts[1]!;
      expect(commit.match(/INSERT INTO/g)).toHaveLength(3);
      expect(commit).toContain('dead_letters');
      expect(commit.endsWith('COMMIT')).toBe(true);
      const restored = await t.backend.store.loadSchedule('d/1');
      expect(restored).toMatchObject({ attempts: 1, lastError: 'no d/1' });
      expect((await t.backend.store.loadDeadLetter('d/4'))?.error).toBe('gave up');
      expect((await t.backend.store.loadSchedule('rec/0'))?.recurrence).toBeDefined();
      expect((await t.backend.store.pageDeadLetters()).items.map((d) => d.key)).toEqual([
        'd/3',
        'd/4',
        'd/5',
      ]);
    } finally {
      await t.close();
    }
  });

  it('sends a transaction that only schedules as one statement, without BEGIN or COMMIT', async () => {
    const t = await recorded();
    try {
      const from = t.sent.length;
      await t.backend.store.transact(async (tx) => {
        for (let i = 0; i < 5; i++)
          await tx.schedule(`only/${i}`, new Date(Date.now() + HOUR), { type: 't' });
      });
      const texts = t.sent
        .slice(from)
        .map((s) => s.text)
        .filter((text) => !text.includes('pg_notify'));
      expect(texts).toHaveLength(1);
      expect(texts[0]).toMatch(/^INSERT INTO .* unnest\(/s);
      expect((await t.backend.store.listSchedules()).map((s) => s.key)).toEqual(
        Array.from({ length: 5 }, (_, i) => `only/${i}`),
      );
    } finally {
      await t.close();
    }
  });

  it('holds no connection and no transaction when nothing is due', async () => {
    const t = await recorded();
    try {
      const tx = await t.backend.store.driver.deliver(new Date(), 10);
      expect(tx.claimed).toEqual([]);
      await tx.rollback();
      expect(t.pool.totalCount - t.pool.idleCount).toBe(0);
      const open = await t.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid() AND query LIKE '%${t.schema}%'`,
      );
      expect(open.rows[0].n).toBe(0);
    } finally {
      await t.close();
    }
  });
});

describe('delivery batches: claims and parts', () => {
  it('gives open deliveries disjoint pages on connections of their own; a rollback makes its page claimable again', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 12);
      const first = await t.backend.store.driver.deliver(new Date(), 5);
      const second = await t.backend.store.driver.deliver(new Date(), 5);
      expect(first.claimed.map((s) => s.key)).toEqual(['d/0', 'd/1', 'd/2', 'd/3', 'd/4']);
      expect(second.claimed.map((s) => s.key)).toEqual(['d/5', 'd/6', 'd/7', 'd/8', 'd/9']);
      expect(first.sql).not.toBe(second.sql);
      await first.rollback();
      const third = await t.backend.store.driver.deliver(new Date(), 10);
      expect(third.claimed.map((s) => s.key)).toEqual(['d/0', 'd/1', 'd/2', 'd/3', 'd/4', 'd/10', 'd/11']);
      await second.commit();
      await third.commit();
      expect(await t.backend.store.listSchedules()).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('rolls back a part whose processor caught an SQL error: the transaction was aborted, the others commit', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 4);
      const before = (await t.backend.store.loadSchedule('d/1'))!;
      const { dispatcher, stop } = run(t.backend, {
        processor: async (tx, _message, { schedule }) => {
          await tx.sql.query(`INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`, [schedule.key]);
          if (schedule.key === 'd/1') {
            // An error the processor swallows: PostgreSQL has aborted the transaction all the same.
            await tx.sql.query('SELECT * FROM no_such_table').catch(() => {});
          }
        },
      });
      try {
        await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
      } finally {
        await stop();
      }
      expect(dispatcher.snapshot()).toMatchObject({ delivered: 3, failed: 1 });
      expect(await t.rows()).toEqual(['d/0', 'd/2', 'd/3']);
      const failed = await t.backend.store.loadSchedule('d/1');
      expect(failed).toMatchObject({ version: before.version, attempts: 1 });
      expect(failed?.lastError).toMatch(/aborted the transaction/);
    } finally {
      await t.close();
    }
  });

  it('keeps an earlier part’s put-back that was sent inside a later part rolled back', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 3);
      const { dispatcher, stop } = run(t.backend, {
        processor: async (tx, message, { schedule }) => {
          if (schedule.key === 'd/0') throw new Error('fails without SQL');
          // d/1's first statement carries d/0's put-back inside d/1's savepoint; then d/1 fails too.
          await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
          if (schedule.key === 'd/1') throw new Error('fails after SQL');
        },
      });
      try {
        await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
      } finally {
        await stop();
      }
      expect(dispatcher.snapshot()).toMatchObject({ delivered: 1, failed: 2 });
      const pending = await t.backend.store.listSchedules();
      expect(pending.map((s) => [s.key, s.attempts, s.lastError])).toEqual([
        ['d/0', 1, 'Error: fails without SQL'],
        ['d/1', 1, 'Error: fails after SQL'],
      ]);
      expect((await t.backend.store.loadEvents('a1')).length).toBe(0);
      expect((await t.backend.store.loadEvents('a2')).length).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('puts a schedule back at its version, with the failure’s attempts, due time, error and occurrence', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 1);
      const before = (await t.backend.store.loadSchedule('d/0'))!;
      const tx = await t.backend.store.driver.deliver(new Date(), 10);
      const at = new Date(Date.now() - 5_000);
      const dueAt = new Date(Date.now() + HOUR);
      await tx.restore(tx.claimed[0]!, { attempts: 3, dueAt, error: 'Error: it\u0000 failed', at });
      await tx.commit();
      expect(await t.backend.store.loadSchedule('d/0')).toEqual({
        ...before,
        at,
        dueAt,
        attempts: 3,
        lastError: 'Error: it failed',
      });
    } finally {
      await t.close();
    }
  });

  it('arms the next occurrence only where the batch left no schedule of that key', async () => {
    const t = await recorded();
    try {
      await t.backend.store.transact(async (tx) => {
        for (const key of ['r/kept', 'r/replaced'])
          await tx.schedule(key, recurring(interval(HOUR)), { type: 'r' });
      });
      const tx = await t.backend.store.driver.deliver(new Date(Date.now() + 2 * HOUR), 10);
      const next = new Date(Date.now() + 3 * HOUR);
      for (const schedule of tx.claimed) {
        tx.savepoint(schedule.key);
        if (schedule.key === 'r/replaced')
          await tx.putSchedule('r/replaced', new Date(Date.now() + 2 * HOUR), { type: 'replacement' });
        await tx.releaseSavepoint();
        await tx.rearm(schedule, next, schedule.recurrence!);
      }
      await tx.commit();
      const kept = await t.backend.store.loadSchedule('r/kept');
      expect(kept?.at).toEqual(next);
      expect(kept?.recurrence).toEqual(tx.claimed[0]!.recurrence);
      expect(kept!.version).toBeGreaterThan(tx.claimed[0]!.version);
      const replaced = await t.backend.store.loadSchedule('r/replaced');
      expect(replaced?.message).toEqual({ type: 'replacement' });
      expect(replaced && 'recurrence' in replaced).toBe(false);
    } finally {
      await t.close();
    }
  });
});

describe('delivery batches: a claim the last lookup says is pointless is not sent', () => {
  it('answers nothing due without a query while listening and nothing changed since the next-due lookup', async () => {
    const t = await recorded();
    const other = await createPostgresBackend(
      { connectionString: urlWithUser(PG_URL) },
      { schema: t.schema, migrate: false },
    );
    const { store } = t.backend;
    const driver = store.driver;
    const claimsSince = (from: number) =>
      t.sent.slice(from).filter((s) => s.text.includes('WITH claimed AS'));
    try {
      await store.transact((tx) => tx.schedule('later/1', new Date(Date.now() + HOUR), { type: 't' }));
      // Not listening: every delivery asks.
      let from = t.sent.length;
      const asked = await driver.deliver(new Date(), 10);
      expect(asked.claimed).toEqual([]);
      await asked.rollback();
      expect(claimsSince(from)).toHaveLength(1);

      const changes: unknown[] = [];
      const unwatch = store.onChange((change) => changes.push(change));
      await waitFor('the LISTEN connection', () => changes.length > 0);
      expect((await driver.nextDueAt())?.getTime()).toBeGreaterThan(Date.now());
      from = t.sent.length;
      const quiet = await driver.deliver(new Date(), 10);
      expect(quiet.claimed).toEqual([]);
      await quiet.rollback();
      expect(claimsSince(from)).toHaveLength(0);

      // A commit of this instance that schedules something due now: the next delivery asks, and claims it.
      await store.transact((tx) => tx.schedule('now/local', new Date(Date.now() - 1), { type: 't' }));
      const local = await driver.deliver(new Date(), 10);
      expect(local.claimed.map((s) => s.key)).toEqual(['now/local']);
      await local.commit();

      // Another instance's commit, heard through LISTEN/NOTIFY.
      expect((await driver.nextDueAt())?.getTime()).toBeGreaterThan(Date.now());
      const heard = changes.length;
      await other.store.transact((tx) => tx.schedule('now/remote', new Date(Date.now() - 1), { type: 't' }));
      await waitFor('the other instance’s announcement', () => changes.length > heard);
      const remote = await driver.deliver(new Date(), 10);
      expect(remote.claimed.map((s) => s.key)).toEqual(['now/remote']);
      await remote.commit();

      // A lookup past which time has moved on does not hold back a delivery at a later instant.
      const later = await driver.deliver(new Date(Date.now() + 2 * HOUR), 10);
      expect(later.claimed.map((s) => s.key)).toEqual(['later/1']);
      await later.rollback();
      unwatch();
    } finally {
      await other.close();
      await t.close();
    }
  });
});
