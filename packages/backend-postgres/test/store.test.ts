import { freshNamespace } from '@duetime/conformance';
import { type Backend, InvalidArgumentError, type Message } from '@duetime/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quoteIdent } from '../src/sql/ident.js';
import { scheduleSql } from '../src/sql/schedules.js';
import { adminClient, dropSchemas, open, schemaFor } from './adapter.js';

const HOUR = 3_600_000;
const msg = (id: string, data?: unknown): Message => ({
  type: 't',
  aggregateId: id,
  ...(data === undefined ? {} : { data }),
});
let admin: pg.Client;
let backend: Backend & { namespace: string };

beforeAll(async () => {
  admin = await adminClient();
  const namespace = freshNamespace();
  backend = Object.assign(await open(namespace), { namespace });
});
afterAll(async () => {
  await backend.close();
  await admin.end();
  await dropSchemas();
});

async function clear(): Promise<void> {
  await admin.query(`DELETE FROM "${schemaFor(backend.namespace)}".schedules`);
}

async function insertMany(
  count: number,
  key: (i: number) => string,
  at: (i: number) => number,
): Promise<void> {
  for (let start = 0; start < count; start += 1000)
    await backend.store.transact(async (tx) => {
      for (let i = start; i < Math.min(count, start + 1000); i++)
        await tx.schedule(key(i), new Date(at(i)), msg(`m${i}`));
    });
}

describe('the due index', () => {
  it('finds due work and the next deadline through schedules_due_idx, never a sequential scan', async () => {
    await clear();
    const base = Date.now() + HOUR;
    await insertMany(
      20_000,
      (i) => `idx/${i}`,
      (i) => base + i * 1000,
    );
    await admin.query(`ANALYZE "${schemaFor(backend.namespace)}".schedules`);
    const plan = async (sql: string) =>
      (await admin.query(`EXPLAIN ${sql}`)).rows.map((r) => r['QUERY PLAN'] as string).join('\n');
    const s = `"${schemaFor(backend.namespace)}".schedules`;
    const due = await plan(
      `SELECT * FROM ${s} WHERE due_at <= now() + interval '2 hours' ORDER BY due_at, key LIMIT 64`,
    );
    expect(due).toContain('schedules_due_idx');
    expect(due).not.toMatch(/Seq Scan|Sort/);
    const next = await plan(`SELECT due_at FROM ${s} ORDER BY due_at LIMIT 1`);
    expect(next).toContain('schedules_due_idx');
    expect(next).not.toMatch(/Seq Scan|Sort/);
    const prefix = await plan(`DELETE FROM ${s} WHERE starts_with(key, 'idx/19')`);
    expect(prefix).toContain('schedules_pkey');
    // A delivery's claim updates the rows it picked through the primary key: never a pass over the table
    // (a hash join with the picked rows read all 20,000 rows for every claim).
    const claim = (
      await admin.query(`EXPLAIN ${scheduleSql(quoteIdent(schemaFor(backend.namespace))).claim}`, [
        new Date(base + 2 * HOUR).toISOString(),
        256,
        30_000,
        'planner',
      ])
    ).rows
      .map((r) => r['QUERY PLAN'] as string)
      .join('\n');
    expect(claim).toContain('schedules_due_idx');
    expect(claim).toContain('schedules_pkey');
    expect(claim).not.toMatch(/Seq Scan/);

    expect((await backend.store.nextDueAt())?.getTime()).toBe(base);
    const page = await backend.store.listSchedules(new Date(base + 10_500));
    expect(page.map((p) => p.key)).toEqual(Array.from({ length: 11 }, (_, i) => `idx/${i}`));
    expect(await backend.store.listSchedules(new Date(base - 1))).toEqual([]);
  });
});

describe('listing and prefixes with many rows', () => {
  it('pages 5,000 schedules with equal deadlines in (at, key) order without gaps or repeats', async () => {
    await clear();
    const at = Date.now() + HOUR;
    await insertMany(
      5000,
      (i) => `page/${String(i).padStart(5, '0')}`,
      (i) => at + (i % 7),
    );
    const seen: string[] = [];
    let page = await backend.store.pageSchedules({ limit: 701 });
    for (;;) {
      seen.push(...page.items.map((s) => s.key));
      if (!page.next) break;
      page = await backend.store.pageSchedules({ limit: 701, after: page.next });
    }
    expect(seen).toHaveLength(5000);
    expect(new Set(seen).size).toBe(5000);
    const expected = Array.from({ length: 5000 }, (_, i) => ({
      key: `page/${String(i).padStart(5, '0')}`,
      at: at + (i % 7),
    }))
      .sort((a, b) => a.at - b.at || (a.key < b.key ? -1 : 1))
      .map((e) => e.key);
    expect(seen).toEqual(expected);
  });

  it('treats LIKE and regex characters in prefixes literally, across thousands of keys', async () => {
    await clear();
    const at = Date.now() + HOUR;
    const families = ['a%b/', 'a_b/', 'a\\b/', 'a.b/', 'a*b/', 'aXb/', 'ü/ß/', '🙂/'];
    await insertMany(
      800,
      (i) => `${families[i % families.length]}${i}`,
      () => at,
    );
    for (const family of families) {
      const listed = await backend.store.pageSchedules({ prefix: family, limit: 1000 });
      expect(listed.items).toHaveLength(100);
      expect(listed.items.every((s) => s.key.startsWith(family))).toBe(true);
    }
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('a_b/'))).toBe(100);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('a%'))).toBe(100);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('a\\'))).toBe(100);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('🙂'))).toBe(100);
    expect((await backend.store.pageSchedules({ limit: 1000 })).items).toHaveLength(400);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix(''))).toBe(400);
  });
});

describe('values round-trip exactly', () => {
  it('keeps instants from 4713 BC to year 275760 to the millisecond, and refuses earlier ones', async () => {
    await clear();
    const instants = [
      Date.UTC(-4712, 0, 1, 12, 0, 0, 1),
      Date.UTC(-43, 2, 15, 10, 30, 0, 500),
      Date.UTC(0, 0, 1),
      Date.UTC(1969, 11, 31, 23, 59, 59, 999),
      Date.UTC(2026, 2, 29, 1, 30, 0, 123),
      Date.UTC(10_000, 0, 1, 0, 0, 0, 7),
      8.64e15,
    ];
    await backend.store.transact(async (tx) => {
      for (const [i, t] of instants.entries()) await tx.schedule(`t/${i}`, new Date(t), msg(`${i}`));
    });
    for (const [i, t] of instants.entries()) {
      const s = await backend.store.loadSchedule(`t/${i}`);
      expect([s?.at.getTime(), s?.dueAt.getTime()]).toEqual([t, t]);
    }
    expect((await backend.store.listSchedules(new Date(-8.64e15))).length).toBe(0);
    expect((await backend.store.listSchedules(new Date(8.64e15))).length).toBe(instants.length);
    const error = await backend.store
      .transact((tx) => tx.schedule('too/early', new Date(-8.64e15), msg('x')))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('at');
  });

  it('keeps message JSON as given: key order, unicode, escapes, nulls; event data absent vs null', async () => {
    const data = {
      z: 1,
      a: [1, 'two', null, { nested: true }],
      s: 'quote \' " back\\slash \u0000 nul ü 🙂',
      n: -0.5e-7,
      big: 1.7976931348623157e308,
    };
    await backend.store.transact((tx) => tx.schedule('json/1', new Date(Date.now() + HOUR), msg('j', data)));
    const loaded = await backend.store.loadSchedule('json/1');
    expect(loaded?.message.data).toEqual(data);
    expect(JSON.stringify(loaded?.message.data)).toBe(JSON.stringify(data));
    const { effects } = await import('@duetime/conformance');
    await backend.store.transact((tx) =>
      tx.exec(effects, 'ev', (_s, ag) => {
        ag.raise('effect.applied');
        ag.raise('effect.applied', null);
        ag.raise('effect.noted', data);
      }),
    );
    const events = await backend.store.loadEvents('ev');
    expect('data' in events[0]!).toBe(false);
    expect(events[1]).toMatchObject({ data: null, sequence: 2 });
    expect(events[2]?.data).toEqual(data);
  });

  it('ignores the application’s global pg type parsers', async () => {
    const previous = [20, 1184, 114].map((oid) => [oid, pg.types.getTypeParser(oid)] as const);
    pg.types.setTypeParser(20, (v) => BigInt(v));
    pg.types.setTypeParser(1184, (v) => `text:${v}`);
    pg.types.setTypeParser(114, () => 'not json');
    try {
      const at = new Date(Date.now() + HOUR);
      await backend.store.transact((tx) => tx.schedule('types/1', at, msg('t', { ok: true })));
      const s = await backend.store.loadSchedule('types/1');
      expect(typeof s?.version).toBe('number');
      expect(s?.at.getTime()).toBe(at.getTime());
      expect(s?.message.data).toEqual({ ok: true });
      const grant = await backend.leases.acquire('types', 'me', 10_000);
      expect(typeof grant?.token).toBe('number');
    } finally {
      for (const [oid, parser] of previous) pg.types.setTypeParser(oid, parser as (v: string) => unknown);
    }
  });
});
