import type { Message } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { deadLetterListQuery, listQuery } from '../src/sql/queries.js';
import { tables } from '../src/sql/tables.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();
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
  // Deeper than SQLite's JSON functions go (1,000 levels): read whole, cut by core.
  'p/deep': { type: 'deep', data: JSON.parse(`${'['.repeat(1200)}${']'.repeat(1200)}`) },
  'p/small': { type: 'small', data: { a: 1, b: [true, null] } },
};

/** Keeps a dead letter straight in the table, as a delivery that gave up would. */
function insertDead(db: Database.Database, key: string, message: Message): void {
  db.prepare(
    `INSERT INTO duetime_dead_letters (key, version, at, message, attempts, error, dead_at)
     VALUES (?, 1, ?, ?, 3, 'boom', ?)`,
  ).run(key, Date.now(), JSON.stringify(message), Date.now());
}

describe('counts and previews on SQLite', () => {
  it('counts dead letters and schedules with bounded index-only queries, under a prefix', async () => {
    const file = files.file('counts');
    const backend = await createSqliteBackend({ filename: file });
    const db = new Database(file);
    db.transaction(() => {
      for (let i = 0; i < 1200; i++)
        insertDead(db, `${i % 3 === 0 ? 'a' : 'b'}/${i}`, { type: 't', data: 'y'.repeat(10_000) });
    })();
    const store = backend.store;
    expect(await store.countDeadLetters()).toBe(1200);
    expect(await store.countDeadLetters({ prefix: 'a/' })).toBe(400);
    expect(await store.countDeadLetters({ prefix: 'b/' })).toBe(800);
    expect(await store.countDeadLetters({ prefix: 'b/', limit: 500 })).toBe(500);
    expect(await store.countDeadLetters({ limit: 1 })).toBe(1);
    expect(await store.countDeadLetters({ prefix: 'c/' })).toBe(0);
    // A prefix of only U+10FFFF characters has no upper bound: searched from the prefix on.
    insertDead(db, '\u{10FFFF}/x', { type: 't' });
    expect(await store.countDeadLetters({ prefix: '\u{10FFFF}' })).toBe(1);

    const base = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (let i = 0; i < 300; i++)
        await tx.schedule(`${i % 2 === 0 ? 'even' : 'odd'}/${i}`, new Date(base + i * 1000), { type: 't' });
    });
    expect(await store.countSchedules()).toBe(300);
    expect(await store.countSchedules({ prefix: 'odd/' })).toBe(150);
    expect(await store.countSchedules({ prefix: 'odd/', limit: 20 })).toBe(20);
    expect(await store.countSchedules({ through: new Date(base + 99_000) })).toBe(100);
    expect(await store.countSchedules({ order: 'due', through: new Date(base + 9_000), limit: 5 })).toBe(5);
    expect(await store.countSchedules({ recurring: true })).toBe(0);
    db.close();
    await backend.close();
  });

  it('cuts the data of a page in SQL at `preview` characters and says so; loads stay whole', async () => {
    const file = files.file('previews');
    const backend = await createSqliteBackend({ filename: file });
    const store = backend.store;
    const at = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (const [key, message] of Object.entries(MESSAGES)) await tx.schedule(key, new Date(at), message);
    });
    const db = new Database(file);
    for (const [key, message] of Object.entries(MESSAGES)) insertDead(db, key, message);

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
      expect(byKey.get('p/nul')?.dataPreview).toEqual({ text: '"a\\u0', cut: true });
      expect(byKey.get('p/deep')?.dataPreview).toEqual({ text: '[[[[[', cut: true });
      for (const item of items) expect(item.message).not.toHaveProperty('data');
    }
    const wide = await store.pageSchedules({ prefix: 'p/small', preview: 1000 });
    expect(wide.items[0]?.dataPreview).toEqual({ text: '{"a":1,"b":[true,null]}', cut: false });
    const exact = await store.pageDeadLetters({ prefix: 'p/emoji', preview: 12 });
    expect(exact.items[0]?.dataPreview).toEqual({ text: JSON.stringify(EMOJI), cut: false });

    // What the engine hands over: at most `preview` characters of data per row, the message without it.
    const t = tables('duetime_');
    const shape = { order: 'at', through: false, after: false, prefix: 'none', recurring: false } as const;
    const rows = [
      ...db.prepare(listQuery(t, { ...shape, select: 'preview' })).all({ limit: 10, preview: 100 }),
      ...db
        .prepare(deadLetterListQuery(t, { prefix: 'none', after: false, select: 'preview' }))
        .all({ limit: 10, preview: 100 }),
    ] as { message: string; data_text: string | null }[];
    expect(rows).toHaveLength(12);
    for (const row of rows) {
      if (row.message.includes('"deep"')) continue; // whole, see above
      expect(row.message.length).toBeLessThan(200);
      expect(row.data_text?.length ?? 0).toBeLessThanOrEqual(100);
    }

    // Without preview, and one by one, values come whole.
    const whole = await store.pageSchedules({ prefix: 'p/big' });
    expect(whole.items[0]?.message.data).toEqual(BIG);
    expect(whole.items[0]?.dataPreview).toBeUndefined();
    expect((await store.loadSchedule('p/big'))?.message.data).toEqual(BIG);
    expect((await store.loadDeadLetter('p/big'))?.message.data).toEqual(BIG);
    expect((await store.loadDeadLetter('p/nul'))?.message.data).toBe('a\u0000b');
    await expect(store.pageSchedules({ preview: 0 })).rejects.toMatchObject({ field: 'query.preview' });
    await expect(store.pageDeadLetters({ preview: 300_000 })).rejects.toMatchObject({
      field: 'query.preview',
    });
    db.close();
    await backend.close();
  });
});
