import { freshNamespace } from '@duetime/conformance';
import type { Backend, Message } from '@duetime/core';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deadLetterSql } from '../src/sql/dead-letters.js';
import { quoteIdent } from '../src/sql/ident.js';
import { scheduleSql } from '../src/sql/schedules.js';
import { adminClient, dropSchemas, open, schemaFor } from './adapter.js';

const HOUR = 3_600_000;
const TRACE = { traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01' };
/** 200,000 characters of data: its JSON text is 200,012 characters. */
const BIG = { note: 'x'.repeat(200_000) };
const EMOJI = '😀'.repeat(10);

/** The messages of the preview tests, by key: large, small, without data, astral and NUL characters. */
const MESSAGES: Record<string, Message> = {
  'p/big': { type: 'big', aggregateId: 'A-1', data: BIG, trace: TRACE },
  'p/emoji': { type: 'emoji', data: EMOJI },
  'p/none': { type: 'none', aggregateId: 'A-3' },
  'p/nul': { type: 'nul', data: 'a\u0000b' },
  'p/deep': { type: 'deep', data: JSON.parse(`${'['.repeat(1200)}${']'.repeat(1200)}`) },
  'p/small': { type: 'small', data: { a: 1, b: [true, null] } },
};

let admin: pg.Client;
let backend: Backend<pg.PoolClient>;
let schema: string;

beforeAll(async () => {
  admin = await adminClient();
  const namespace = freshNamespace();
  backend = await open(namespace);
  schema = quoteIdent(schemaFor(namespace));
});
afterAll(async () => {
  await backend.close();
  await admin.end();
  await dropSchemas();
});

/** Keeps dead letters straight in the table, as deliveries that gave up would. */
async function insertDead(entries: [string, Message][]): Promise<void> {
  await admin.query(
    `INSERT INTO ${schema}.dead_letters (key, version, at, message, attempts, error, dead_at)
     SELECT k, 1, now(), m::json, 3, 'boom', now() FROM unnest($1::text[], $2::text[]) AS e(k, m)`,
    [entries.map(([key]) => key), entries.map(([, message]) => JSON.stringify(message))],
  );
}

/**
 * The plan of `text` when the planner may not prefer a sequential scan, a sort or a bitmap scan (and, with
 * `indexOnly`, a plain index scan): what the query's shape allows, not what a table of a few thousand rows
 * costs best. On a small table the planner may well read it all and sort, and whether an index-only scan
 * looks cheap depends on the visibility map, which VACUUM cannot set while other sessions (the suite's
 * other files) hold old snapshots. A query that cannot walk the index still shows the disabled node.
 */
async function plan(text: string, params: unknown[], options: { indexOnly?: boolean } = {}): Promise<string> {
  await admin.query('BEGIN');
  try {
    await admin.query(
      'SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off',
    );
    if (options.indexOnly) await admin.query('SET LOCAL enable_indexscan = off');
    const rows = (await admin.query(`EXPLAIN ${text}`, params)).rows as { 'QUERY PLAN': string }[];
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    await admin.query('ROLLBACK');
  }
}

describe('counts and previews on PostgreSQL', () => {
  it('counts dead letters with a bounded index-only walk, under a prefix', async () => {
    const entries: [string, Message][] = [];
    for (let i = 0; i < 3000; i++)
      entries.push([`${i % 3 === 0 ? 'a' : 'b'}/${i}`, { type: 't', data: 'y'.repeat(10_000) }]);
    await insertDead(entries);
    await admin.query(`VACUUM ANALYZE ${schema}.dead_letters`);
    const store = backend.store;
    expect(await store.countDeadLetters()).toBe(3000);
    expect(await store.countDeadLetters({ prefix: 'a/' })).toBe(1000);
    expect(await store.countDeadLetters({ prefix: 'b/' })).toBe(2000);
    expect(await store.countDeadLetters({ prefix: 'b/', limit: 500 })).toBe(500);
    expect(await store.countDeadLetters({ limit: 1 })).toBe(1);
    expect(await store.countDeadLetters({ prefix: 'c/' })).toBe(0);
    // The query: the primary key's index alone (no message read), stopped at the limit.
    for (const q of [{ limit: 10_000 }, { prefix: 'b/', limit: 500 }]) {
      const { text, params } = deadLetterSql(schema).count(q);
      const detail = await plan(text, params, { indexOnly: true });
      expect(detail).toMatch(/Limit/);
      expect(detail).toMatch(/Index Only Scan using dead_letters_pkey/);
      expect(detail).not.toMatch(/Seq Scan|Sort/);
    }
    await admin.query(`DELETE FROM ${schema}.dead_letters`);
  });

  it('cuts the data of a page in SQL at `preview` characters and says so; loads stay whole', async () => {
    const store = backend.store;
    const at = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (const [key, message] of Object.entries(MESSAGES)) await tx.schedule(key, new Date(at), message);
    });
    await insertDead(Object.entries(MESSAGES));

    const page = await store.pageSchedules({ prefix: 'p/', preview: 5 });
    const dead = await store.pageDeadLetters({ prefix: 'p/', preview: 5 });
    for (const items of [page.items, dead.items]) {
      const byKey = new Map(items.map((item) => [item.key, item]));
      expect([...byKey.keys()].sort()).toEqual(Object.keys(MESSAGES).sort());
      expect(byKey.get('p/big')?.message).toEqual({ type: 'big', aggregateId: 'A-1', trace: TRACE });
      expect(byKey.get('p/big')?.dataPreview).toEqual({ text: '{"not', cut: true });
      // Characters are code points: five of `"😀😀…"` are the quote and four emoji (nine UTF-16 units).
      expect(byKey.get('p/emoji')?.dataPreview).toEqual({ text: `"${'😀'.repeat(4)}`, cut: true });
      expect(byKey.get('p/none')?.message).toEqual({ type: 'none', aggregateId: 'A-3' });
      expect(byKey.get('p/none')?.dataPreview).toBeUndefined();
      // A NUL in the data (which jsonb refuses) is cut as the JSON text it is stored as.
      expect(byKey.get('p/nul')?.dataPreview).toEqual({ text: '"a\\u0', cut: true });
      expect(byKey.get('p/deep')?.dataPreview).toEqual({ text: '[[[[[', cut: true });
      for (const item of items) expect(item.message).not.toHaveProperty('data');
    }
    const wide = await store.pageSchedules({ prefix: 'p/small', preview: 1000 });
    expect(wide.items[0]?.dataPreview).toEqual({ text: '{"a":1,"b":[true,null]}', cut: false });
    const exact = await store.pageDeadLetters({ prefix: 'p/emoji', preview: 12 });
    expect(exact.items[0]?.dataPreview).toEqual({ text: JSON.stringify(EMOJI), cut: false });

    // What the server sends: at most `preview` characters of data per row, the message without it.
    const rows: { message: unknown; dataText: string | null }[] = [];
    for (const { text, params } of [
      scheduleSql(schema).list({ order: 'key', prefix: 'p/', preview: 100, limit: 10 }),
      deadLetterSql(schema).list({ prefix: 'p/', preview: 100, limit: 10 }),
    ])
      rows.push(...(await admin.query(text, params)).rows);
    expect(rows).toHaveLength(12);
    for (const row of rows) {
      expect(JSON.stringify(row.message).length).toBeLessThan(200);
      expect(row.dataText?.length ?? 0).toBeLessThanOrEqual(100);
    }

    // Pages walk the order's index and stop at the limit: no sort, each row taken apart only once read.
    await store.transact(async (tx) => {
      for (let i = 0; i < 2000; i++)
        await tx.schedule(`q/${i}`, new Date(at + i), { type: 'q', data: { i, pad: 'z'.repeat(500) } });
    });
    await admin.query(`ANALYZE ${schema}.schedules`);
    for (const q of [
      { order: 'at', limit: 25 },
      { order: 'at', limit: 25, preview: 4000 },
      { order: 'at', limit: 25, preview: 4000, after: { at, key: 'q/5' } },
      { order: 'due', limit: 25, preview: 4000 },
    ] as const) {
      const { text, params } = scheduleSql(schema).list(q);
      const detail = await plan(text, params);
      expect(detail).toMatch(q.order === 'at' ? /Index Scan using schedules_at_idx/ : /schedules_due_idx/);
      expect(detail).not.toMatch(/Seq Scan|Sort/);
    }
    const deadList = deadLetterSql(schema).list({ preview: 4000, limit: 25 });
    expect(await plan(deadList.text, deadList.params)).not.toMatch(/Sort/);

    // Without preview, and one by one, values come whole.
    const whole = await store.pageSchedules({ prefix: 'p/big' });
    expect(whole.items[0]?.message.data).toEqual(BIG);
    expect(whole.items[0]?.dataPreview).toBeUndefined();
    expect((await store.loadSchedule('p/big'))?.message.data).toEqual(BIG);
    expect((await store.loadDeadLetter('p/big'))?.message.data).toEqual(BIG);
    expect((await store.loadDeadLetter('p/nul'))?.message.data).toBe('a\u0000b');
  });
});
