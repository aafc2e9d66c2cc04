import { effects, freshNamespace, waitFor } from '@duetime/conformance';
import {
  type Backend,
  Dispatcher,
  type DispatcherOptions,
  interval,
  recurring,
  type Settlement,
  silentLogger,
  systemClock,
} from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Connection } from '../src/connection.js';
import { createPostgresBackend } from '../src/index.js';
import { ChangeNotifier } from '../src/notifications.js';
import { PostgresStore, type PostgresUnit } from '../src/store.js';
import { dropSchemas, PG_URL, schemaFor, urlWithUser } from './adapter.js';

const HOUR = 3_600_000;

afterAll(dropSchemas);

/**
 * A backend on a pool of the test's own whose clients record every message they send (one entry per
 * `client.query` call: one round trip each; control statements that ride with a statement are written
 * ahead of it, `BEGIN | INSERT …`), with an application table next to duetime's.
 */
async function recorded() {
  const schema = schemaFor(freshNamespace());
  const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 6 });
  const sent: { client: pg.PoolClient; text: string }[] = [];
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const first = args[0] as string | { text?: string; name?: string; lead?: { statements: string[] } };
      const text = typeof first === 'string' ? first : (first.text ?? first.name ?? '');
      const lead = typeof first === 'string' ? undefined : first.lead;
      sent.push({
        client: client as pg.PoolClient,
        text: lead ? `${lead.statements.join('; ')} | ${text}` : text,
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

/** The store adapter over `t`'s pool and schema (the backend opened on it migrated the schema). */
function adapterOf(t: { pool: pg.Pool; schema: string }, claimTimeoutMs = 30_000) {
  const connection = new Connection({
    pool: t.pool,
    ownsPool: false,
    target: { host: '', port: 0, database: '', user: '', schema: t.schema },
    secret: undefined,
    logger: silentLogger,
    clock: systemClock,
    preparedStatements: true,
  });
  const notifier = new ChangeNotifier({
    schema: t.schema,
    createClient: () => new pg.Client({ connectionString: urlWithUser(PG_URL) }),
    send: async () => {},
    logger: silentLogger,
  });
  return new PostgresStore(connection, notifier, claimTimeoutMs);
}

/** Statements sent on `unit`'s connection since entry `from`. */
function sentBy(sent: { client: pg.PoolClient; text: string }[], from: number, unit: PostgresUnit): string[] {
  return sent
    .slice(from)
    .filter((s) => s.client === (unit.client as pg.PoolClient))
    .map((s) => s.text);
}

const consume = (schedule: Settlement['schedule'], more: Partial<Settlement> = {}): Settlement => ({
  schedule,
  outcome: 'consume',
  writes: [],
  ...more,
});

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

describe('delivery units on the adapter', () => {
  it('claims a page in a statement of its own, holding no connection when nothing is due', async () => {
    const t = await recorded();
    const store = adapterOf(t);
    try {
      const empty = await store.begin({ now: new Date(), limit: 10 });
      expect(empty.claimed).toEqual([]);
      expect(empty.client).toBeUndefined();
      await store.commit(empty, { writes: [], settlements: [] });
      expect(t.pool.totalCount - t.pool.idleCount).toBe(0);

      await due(t.backend, 10);
      const unit = await store.begin({ now: new Date(), limit: 10 });
      expect(unit.claimed?.map((s) => s.key)).toEqual(Array.from({ length: 10 }, (_, i) => `d/${i}`));
      expect(unit.claimed?.some((s) => s.interrupted)).toBe(false);
      // The claim is committed: another session sees it.
      const held = await t.pool.query(
        `SELECT count(*)::int AS n FROM "${t.schema}".schedules WHERE claimed_until > clock_timestamp()`,
      );
      expect(held.rows[0].n).toBe(10);
      await store.commit(unit, { writes: [], settlements: unit.claimed!.map((s) => consume(s)) });
      expect(await t.backend.store.listSchedules()).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('gives open units disjoint pages on connections of their own; a rollback makes its page claimable again', async () => {
    const t = await recorded();
    const store = adapterOf(t);
    try {
      await due(t.backend, 12);
      const first = await store.begin({ now: new Date(), limit: 5 });
      const second = await store.begin({ now: new Date(), limit: 5 });
      expect(first.claimed?.map((s) => s.key)).toEqual(['d/0', 'd/1', 'd/2', 'd/3', 'd/4']);
      expect(second.claimed?.map((s) => s.key)).toEqual(['d/5', 'd/6', 'd/7', 'd/8', 'd/9']);
      expect(first.client).not.toBe(second.client);
      await store.rollback(first);
      const third = await store.begin({ now: new Date(), limit: 10 });
      expect(third.claimed?.map((s) => s.key)).toEqual(['d/0', 'd/1', 'd/2', 'd/3', 'd/4', 'd/10', 'd/11']);
      expect(third.claimed?.some((s) => s.interrupted)).toBe(false);
      for (const unit of [second, third])
        await store.commit(unit, { writes: [], settlements: unit.claimed!.map((s) => consume(s)) });
      expect(await t.backend.store.listSchedules()).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('claims again, interrupted, what a dead unit left unsettled once its claim lapsed; a live unit keeps its rows', async () => {
    const t = await recorded();
    const store = adapterOf(t, 300);
    try {
      await due(t.backend, 2);
      const kept = await store.begin({ now: new Date(), limit: 1 });
      const lost = await store.begin({ now: new Date(), limit: 1 });
      expect(lost.claimed?.map((s) => s.key)).toEqual(['d/1']);
      // `lost` dies: its connection is closed, nothing settles its claim. `kept` holds its rows' locks.
      lost.out!.release(true);
      let again: PostgresUnit | undefined;
      await waitFor('the lapsed claim to be claimed again', async () => {
        await store.renew(kept);
        again = await store.begin({ now: new Date(), limit: 10 });
        if (again.claimed!.length > 0) return true;
        await store.rollback(again);
        return false;
      });
      expect(again!.claimed).toEqual([{ ...lost.claimed![0], interrupted: true }]);
      await store.commit(again!, { writes: [], settlements: [consume(again!.claimed![0]!)] });
      await store.commit(kept, { writes: [], settlements: [consume(kept.claimed![0]!)] });
      expect(await t.backend.store.listSchedules()).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('settles a batch with one statement per kind of outcome, then COMMIT', async () => {
    const t = await recorded();
    const store = adapterOf(t);
    try {
      await due(t.backend, 8);
      await t.backend.store.transact((tx) => tx.schedule('rec/0', recurring(interval(HOUR)), { type: 'r' }));
      // Claims as if two hours later: the recurrence's first occurrence is due then.
      const unit = await store.begin({ now: new Date(Date.now() + 2 * HOUR), limit: 10 });
      const from = t.sent.length;
      const at = new Date(Date.now() - 5_000);
      const dueAt = new Date(Date.now() + HOUR);
      const next = new Date(Date.now() + 3 * HOUR);
      const settlements = unit.claimed!.map((s): Settlement => {
        if (s.key === 'rec/0')
          return consume(s, { next: { at: next, ...(s.recurrence ? { recurrence: s.recurrence } : {}) } });
        if (s.key < 'd/3')
          return {
            schedule: s,
            outcome: 'retry',
            failure: { attempts: 3, dueAt, error: `Error: no\u0000 ${s.key}`, at },
            writes: [],
          };
        if (s.key < 'd/6') return consume(s, { dead: { attempts: 5, error: 'gave up', deadAt: new Date() } });
        return { schedule: s, outcome: 'release', writes: [] };
      });
      const before = (await t.backend.store.loadSchedule('d/1'))!;
      await store.commit(unit, { writes: [], settlements });
      const texts = sentBy(t.sent, from, unit);
      // Dead letters, consumed, next, retried, released; COMMIT (BEGIN and the rows' lock went with the claim).
      expect(texts).toHaveLength(6);
      expect(texts.at(-1)).toBe('COMMIT');
      expect(await t.backend.store.loadSchedule('d/1')).toEqual({
        ...before,
        at,
        dueAt,
        attempts: 3,
        lastError: 'Error: no d/1',
      });
      expect((await t.backend.store.pageDeadLetters()).items.map((d) => [d.key, d.error])).toEqual([
        ['d/3', 'gave up'],
        ['d/4', 'gave up'],
        ['d/5', 'gave up'],
      ]);
      const rec = await t.backend.store.loadSchedule('rec/0');
      expect(rec?.at).toEqual(next);
      expect(rec!.version).toBeGreaterThan(unit.claimed!.find((s) => s.key === 'rec/0')!.version);
      // Released schedules are claimable at once; retried ones are due in an hour.
      const later = await store.begin({ now: new Date(), limit: 10 });
      expect(later.claimed?.map((s) => s.key)).toEqual(['d/6', 'd/7']);
      await store.rollback(later);
    } finally {
      await t.close();
    }
  });

  it('arms the next occurrence only where the unit left no schedule of that key', async () => {
    const t = await recorded();
    const store = adapterOf(t);
    try {
      await t.backend.store.transact(async (tx) => {
        for (const key of ['r/kept', 'r/replaced'])
          await tx.schedule(key, recurring(interval(HOUR)), { type: 'r' });
      });
      const unit = await store.begin({ now: new Date(Date.now() + 2 * HOUR), limit: 10 });
      const next = new Date(Date.now() + 3 * HOUR);
      await store.part(unit, () =>
        store.write(unit, [
          {
            op: 'put',
            key: 'r/replaced',
            at: new Date(Date.now() + 2 * HOUR),
            message: { type: 'replacement' },
          },
        ]),
      );
      await store.commit(unit, {
        writes: [],
        settlements: unit.claimed!.map((s) => consume(s, { next: { at: next, recurrence: s.recurrence! } })),
      });
      const kept = await t.backend.store.loadSchedule('r/kept');
      expect(kept?.at).toEqual(next);
      expect(kept?.recurrence).toEqual(unit.claimed![0]!.recurrence);
      const replaced = await t.backend.store.loadSchedule('r/replaced');
      expect(replaced?.message).toEqual({ type: 'replacement' });
      expect(replaced && 'recurrence' in replaced).toBe(false);
    } finally {
      await t.close();
    }
  });
});

describe('delivery batches through the dispatcher', () => {
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

  it('takes a part’s savepoint with its first statement, in its round trip, and releases it with the next part’s', async () => {
    const t = await recorded();
    try {
      await due(t.backend, 4);
      const { dispatcher, stop } = run(t.backend, {
        processor: async (tx, _message, { schedule }) => {
          // d/2 sends no statement: it takes no savepoint.
          if (schedule.key !== 'd/2')
            await tx.sql.query(`INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`, [schedule.key]);
        },
      });
      const from = t.sent.length;
      try {
        await waitFor('the batch to commit', () => dispatcher.snapshot().batches >= 1);
      } finally {
        await stop();
      }
      expect(dispatcher.snapshot()).toMatchObject({ delivered: 4, failed: 0 });
      expect(await t.rows()).toEqual(['d/0', 'd/1', 'd/3']);
      const savepoints = t.sent
        .slice(from)
        .map((s) => s.text)
        .filter((text) => /SAVEPOINT/.test(text));
      const insert = `INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`;
      // One round trip per writing part: its savepoint goes out with its statement.
      expect(savepoints).toEqual([
        `SAVEPOINT duetime_part | ${insert}`,
        `RELEASE SAVEPOINT duetime_part; SAVEPOINT duetime_part | ${insert}`,
        `RELEASE SAVEPOINT duetime_part; SAVEPOINT duetime_part | ${insert}`,
      ]);
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
});

describe('plain transactions', () => {
  it('sends BEGIN with the application’s first statement: three round trips for a row and a schedule', async () => {
    const t = await recorded();
    try {
      const from = t.sent.length;
      await t.backend.store.transact(async (tx) => {
        await tx.sql.query(`INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`, ['r1']);
        await tx.schedule('row/r1', new Date(Date.now() + HOUR), { type: 't' });
      });
      const texts = t.sent
        .slice(from)
        .map((s) => s.text)
        .filter((text) => !text.includes('pg_notify'));
      expect(texts).toHaveLength(3);
      expect(texts[0]).toBe(
        `BEGIN ISOLATION LEVEL READ COMMITTED | INSERT INTO "${t.schema}".app_rows (id) VALUES ($1)`,
      );
      expect(texts[2]).toBe('COMMIT');
      expect(await t.rows()).toEqual(['r1']);
      expect((await t.backend.store.loadSchedule('row/r1'))?.key).toBe('row/r1');
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
});
