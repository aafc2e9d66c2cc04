import { randomBytes } from 'node:crypto';
import { Dispatcher, type StoreChange } from '@duetime/core';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { adminClient, dropSchemas, open, schemaFor } from './adapter.js';

afterAll(() => dropSchemas());

const HOUR = 3_600_000;

/** A backend on a fresh schema, and a plain client on the same database (the "other language"). */
async function world() {
  const namespace = `sqlfn_${randomBytes(4).toString('hex')}`;
  const backend = await open(namespace);
  const schema = `"${schemaFor(namespace)}"`;
  const client = await adminClient();
  return { backend, schema, client };
}

/** The error a statement raised, or undefined. */
async function failure(
  client: pg.Client,
  text: string,
  params: unknown[],
): Promise<pg.DatabaseError | undefined> {
  try {
    await client.query(text, params);
    return undefined;
  } catch (error) {
    return error as pg.DatabaseError;
  }
}

describe('SQL functions: scheduling from any transaction', () => {
  it('schedules from a trigger when a row is inserted, and a dispatcher delivers the message', async () => {
    const { backend, schema, client } = await world();
    await client.query(`
      CREATE TABLE ${schema}.orders (id text PRIMARY KEY);
      CREATE FUNCTION ${schema}.order_expiry() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM ${schema}.schedule('order/' || NEW.id || '/expire', now() - interval '1 second',
          json_build_object('type', 'order.expire', 'aggregateId', NEW.id, 'data', json_build_object('by', 'trigger')));
        RETURN NEW;
      END $$;
      CREATE TRIGGER order_expiry AFTER INSERT ON ${schema}.orders FOR EACH ROW EXECUTE FUNCTION ${schema}.order_expiry();`);
    await client.query(`INSERT INTO ${schema}.orders (id) VALUES ('o-1')`);
    const seen: unknown[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      processor: async (_tx, message, { schedule }) => void seen.push({ key: schedule.key, message }),
    });
    const running = dispatcher.run();
    const deadline = Date.now() + 20_000;
    while (seen.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await dispatcher.drain();
    await running;
    expect(seen).toEqual([
      {
        key: 'order/o-1/expire',
        message: { type: 'order.expire', aggregateId: 'o-1', data: { by: 'trigger' } },
      },
    ]);
    await client.end();
    await backend.close();
  });

  it('replaces with a fresh version from the same sequence, cancels by key and by literal prefix, inside the caller’s transaction', async () => {
    const { backend, schema, client } = await world();
    await backend.store.transact((tx) => tx.schedule('a/1', new Date(Date.now() + HOUR), { type: 't' }));
    const first = (await backend.store.loadSchedule('a/1'))!.version;
    const at = new Date(Date.now() + 2 * HOUR);
    const { rows } = await client.query(`SELECT ${schema}.schedule($1, $2, $3) AS version`, [
      'a/1',
      at,
      { type: 'replaced', data: [1, 2] },
    ]);
    expect(Number(rows[0].version)).toBeGreaterThan(first);
    expect(await backend.store.loadSchedule('a/1')).toMatchObject({
      version: Number(rows[0].version),
      at,
      attempts: 0,
      message: { type: 'replaced', data: [1, 2] },
    });
    for (const key of ['a/flow/1', 'a/flow/2', 'a/flowish', 'a%/x'])
      await client.query(`SELECT ${schema}.schedule($1, now() + interval '1 hour', '{"type":"t"}')`, [key]);
    // Rolled back with the caller's transaction.
    await client.query('BEGIN');
    await client.query(`SELECT ${schema}.schedule('rolled/back', now(), '{"type":"t"}')`);
    await client.query('ROLLBACK');
    expect(await backend.store.loadSchedule('rolled/back')).toBeUndefined();
    const cancelled = await client.query(
      `SELECT ${schema}.cancel_schedule_prefix('a/flow/') AS n, ${schema}.cancel_schedule_prefix('a%') AS pct`,
    );
    expect(cancelled.rows[0]).toEqual({ n: 2, pct: 1 });
    const one = await client.query(
      `SELECT ${schema}.cancel_schedule('a/1') AS yes, ${schema}.cancel_schedule('a/none') AS no`,
    );
    expect(one.rows[0]).toEqual({ yes: true, no: false });
    expect((await backend.store.listSchedules()).map((s) => s.key)).toEqual(['a/flowish']);
    await client.end();
    await backend.close();
  });

  it('wakes a watching dispatcher in another instance when the caller commits', async () => {
    const { backend, schema, client } = await world();
    const changes: StoreChange[] = [];
    const unsubscribe = backend.store.onChange((change) => {
      if (change.channel === undefined) changes.push(change);
    });
    const deadline = Date.now() + 10_000;
    while (!backend.store.watching && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(backend.store.watching).toBe(true);
    const at = new Date(Date.now() + HOUR);
    await client.query('BEGIN');
    await client.query(`SELECT ${schema}.schedule('woken', $1, '{"type":"t"}')`, [at]);
    await new Promise((r) => setTimeout(r, 100));
    expect(changes).toEqual([]);
    await client.query('COMMIT');
    while (changes.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(changes).toEqual([{ remote: true, earliest: at }]);
    unsubscribe();
    await client.end();
    await backend.close();
  });

  it('refuses bad keys, instants and messages with SQLSTATE 22023 naming the field, writing nothing', async () => {
    const { backend, schema, client } = await world();
    const cases: [string, unknown[], string][] = [
      [`SELECT ${schema}.schedule($1, now(), '{"type":"t"}')`, [''], 'key'],
      [`SELECT ${schema}.schedule($1, now(), '{"type":"t"}')`, ['tab\there'], 'key'],
      [`SELECT ${schema}.schedule($1, now(), '{"type":"t"}')`, ['k'.repeat(513)], 'key'],
      [`SELECT ${schema}.schedule($1, now(), '{"type":"t"}')`, [`${'k'.repeat(511)}😀`], 'key'],
      [`SELECT ${schema}.schedule(NULL, now(), '{"type":"t"}')`, [], 'key'],
      [`SELECT ${schema}.schedule('k', NULL, '{"type":"t"}')`, [], 'at'],
      [`SELECT ${schema}.schedule('k', 'infinity', '{"type":"t"}')`, [], 'at'],
      [`SELECT ${schema}.schedule('k', now(), '[1]')`, [], 'message'],
      [`SELECT ${schema}.schedule('k', now(), '{"data":1}')`, [], 'message.type'],
      [`SELECT ${schema}.schedule('k', now(), '{"type":""}')`, [], 'message.type'],
      [`SELECT ${schema}.schedule('k', now(), '{"type":"t","aggregateId":7}')`, [], 'message.aggregateId'],
      [
        `SELECT ${schema}.schedule('k', now(), json_build_object('type', 't', 'data', repeat('x', 300000)))`,
        [],
        'message',
      ],
      [`SELECT ${schema}.cancel_schedule('')`, [], 'key'],
      [`SELECT ${schema}.cancel_schedule_prefix(NULL)`, [], 'prefix'],
    ];
    for (const [text, params, field] of cases) {
      const error = await failure(client, text, params);
      expect(error, `${text} ${JSON.stringify(params).slice(0, 40)}`).toBeDefined();
      expect(error!.code).toBe('22023');
      expect(error!.message).toMatch(
        new RegExp(`^DUETIME_INVALID_ARGUMENT: invalid ${field.replace('.', '\\.')} `),
      );
      expect(error!.detail).toBe(`field: ${field}`);
    }
    // A key of exactly 512 UTF-16 units is fine, as in TypeScript.
    await client.query(`SELECT ${schema}.schedule($1, now() + interval '1 hour', '{"type":"t"}')`, [
      `${'k'.repeat(510)}😀`,
    ]);
    expect(await backend.store.countSchedules()).toBe(1);
    await client.end();
    await backend.close();
  });
});
