import { ManualClock, type StoreChange } from '@duetime/core';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../src/index.js';
import { prefixUpperBound } from '../src/sql/prefix.js';
import { deadLetterListQuery, listQuery, storeQueries } from '../src/sql/queries.js';
import { tables } from '../src/sql/tables.js';
import { tempFiles } from './fixtures/temp.js';

const files = tempFiles();
const HOUR = 3_600_000;
const message = (id: string) => ({ type: 't', aggregateId: id });

/** The query plan of `sql`, with placeholder values bound to its `?` and `@name` parameters. */
function plan(db: Database.Database, sql: string): string {
  const statement = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
  const names = [...new Set([...sql.matchAll(/@(\w+)/g)].map((m) => m[1]!))];
  const positional = (sql.match(/\?/g) ?? []).map(() => 1);
  const rows =
    names.length > 0
      ? statement.all(Object.fromEntries(names.map((n) => [n, /key|lo|hi/i.test(n) ? 'a' : 1])))
      : statement.all(...positional);
  return (rows as { detail: string }[]).map((r) => r.detail).join('; ');
}

describe('the SQLite store driver', () => {
  it('answers the dispatcher’s queries and listings from indices, without sorting', async () => {
    const file = files.file('plans');
    const backend = await createSqliteBackend({ filename: file });
    await backend.close();
    const db = new Database(file, { readonly: true });
    const q = storeQueries(tables('duetime_'));
    expect(plan(db, q.claimDue)).toMatch(/USING (COVERING )?INDEX duetime_schedules_due \(due_at<\?\)/);
    expect(plan(db, q.claimDue)).toMatch(/sqlite_autoindex_duetime_claims_1 \(key=\?\)/);
    expect(plan(db, q.claimDue)).not.toMatch(/TEMP B-TREE/);
    expect(plan(db, q.anyDue)).toMatch(/USING (COVERING )?INDEX duetime_schedules_due \(due_at<\?\)/);
    expect(plan(db, q.loadSchedule)).toMatch(/USING INDEX sqlite_autoindex_duetime_schedules_1 \(key=\?\)/);
    expect(plan(db, q.lastSequence)).toMatch(
      /USING .*INDEX sqlite_autoindex_duetime_events_1 \(aggregate_id=\?\)/,
    );
    for (const order of ['at', 'due'] as const)
      for (const through of [false, true])
        for (const after of [false, true])
          for (const select of ['all', 'heads', 'preview', 'count'] as const) {
            const shape = { order, through, after, prefix: 'none', recurring: false, select } as const;
            const detail = plan(db, listQuery(tables('duetime_'), shape));
            expect(detail).toMatch(order === 'at' ? /duetime_schedules_at/ : /duetime_schedules_due/);
            expect(detail).not.toMatch(/TEMP B-TREE/);
            // A count walks the index alone: no row (no message) is read.
            if (select === 'count') expect(detail).toMatch(/USING COVERING INDEX/);
          }
    for (const prefix of ['none', 'range'] as const) {
      const count = plan(
        db,
        deadLetterListQuery(tables('duetime_'), { prefix, after: false, select: 'count' }),
      );
      expect(count).toMatch(/USING COVERING INDEX sqlite_autoindex_duetime_dead_letters_1/);
      const schedules = plan(
        db,
        listQuery(tables('duetime_'), {
          order: 'key',
          through: false,
          after: false,
          prefix,
          recurring: false,
          select: 'count',
        }),
      );
      expect(schedules).toMatch(/USING COVERING INDEX sqlite_autoindex_duetime_schedules_1/);
    }
    expect(plan(db, `DELETE FROM duetime_schedules WHERE key >= @lo AND key < @hi`)).toMatch(
      /USING INDEX sqlite_autoindex_duetime_schedules_1 \(key>\? AND key<\?\)/,
    );
    db.close();
  });

  it('pages through many schedules sharing deadlines without gaps or repeats, also under a prefix', async () => {
    const backend = await createSqliteBackend({ filename: files.file('paging') }, { synchronous: 'normal' });
    const base = Date.now() + HOUR;
    const count = 3000;
    await backend.store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(
          `${i % 2 === 0 ? 'even' : 'odd'}/${i}`,
          new Date(base + (i % 3) * 1000),
          message(`${i}`),
        );
    });
    const seen: string[] = [];
    for await (const s of backend.store.iterateSchedules({ limit: 128 })) seen.push(s.key);
    expect(seen).toHaveLength(count);
    expect(new Set(seen).size).toBe(count);
    const odd: string[] = [];
    let page = await backend.store.pageSchedules({ prefix: 'odd/', limit: 200 });
    for (;;) {
      odd.push(...page.items.map((s) => s.key));
      if (!page.next) break;
      page = await backend.store.pageSchedules({ prefix: 'odd/', limit: 200, after: page.next });
    }
    expect(odd).toHaveLength(count / 2);
    expect(odd.every((k) => k.startsWith('odd/'))).toBe(true);
    expect(seen.filter((k) => k.startsWith('odd/'))).toEqual(odd);
    expect(await backend.store.listSchedules(new Date(base))).toHaveLength(count / 3);
    await backend.close();
  });

  it('matches prefixes literally at the edges of Unicode', async () => {
    expect(prefixUpperBound('a/flow/')).toBe('a/flow0');
    expect(prefixUpperBound('x\ud7ff')).toBe('x\ue000');
    expect(prefixUpperBound('x\u{10FFFF}')).toBe('y');
    expect(prefixUpperBound('\u{10FFFF}\u{10FFFF}')).toBeUndefined();
    expect(prefixUpperBound('')).toBeUndefined();

    const backend = await createSqliteBackend({ filename: files.file('unicode') });
    const keys = [
      'x\u{10FFFF}',
      'x\u{10FFFF}a',
      'x\u{10FFFE}',
      'x\uffff',
      'x\u{1F642}',
      'y',
      '\u{10FFFF}\u{10FFFF}',
      '\u{10FFFF}\u{10FFFF}z',
      '\u{10FFFF}',
      'ab%',
      'ab_',
      'abc',
    ];
    const at = new Date(Date.now() + HOUR);
    await backend.store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, at, message(key));
    });
    const listed = async (prefix: string) =>
      (await backend.store.pageSchedules({ prefix, limit: 100 })).items.map((s) => s.key).sort();
    expect(await listed('x\u{10FFFF}')).toEqual(['x\u{10FFFF}', 'x\u{10FFFF}a']);
    expect(await listed('x\uffff')).toEqual(['x\uffff']);
    expect(await listed('\u{10FFFF}\u{10FFFF}')).toEqual(['\u{10FFFF}\u{10FFFF}', '\u{10FFFF}\u{10FFFF}z']);
    expect(await listed('ab_')).toEqual(['ab_']);
    expect(await listed('ab%')).toEqual(['ab%']);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('\u{10FFFF}\u{10FFFF}'))).toBe(2);
    expect(await backend.store.transact((tx) => tx.cancelSchedulePrefix('x'))).toBe(5);
    expect((await backend.store.listSchedules()).map((s) => s.key).sort()).toEqual(
      ['\u{10FFFF}', 'ab%', 'ab_', 'abc', 'y'].sort(),
    );
    await backend.close();
  });

  it('notices schedules put by another connection by polling data_version, and nothing else', async () => {
    const file = files.file('watch');
    const clock = new ManualClock();
    const watching = await createSqliteBackend({ filename: file }, { clock, watchIntervalMs: 50 });
    const other = await createSqliteBackend({ filename: file });
    const changes: StoreChange[] = [];
    // The channel reports itself live once; then only other connections' schedules count.
    const unsubscribe = watching.store.onChange((change) => {
      if (change.channel === undefined) changes.push(change);
    });

    await other.leases.acquire('lease', 'someone', 10_000);
    await other.store.transact((tx) => tx.cancelSchedule('nothing'));
    await clock.advance(200);
    expect(changes).toEqual([]);

    await other.store.transact((tx) => tx.schedule('remote/1', new Date(Date.now() + HOUR), message('r')));
    await clock.advance(50);
    expect(changes).toEqual([{ remote: true }]);
    await clock.advance(200);
    expect(changes).toHaveLength(1);

    await watching.store.transact((tx) => tx.schedule('local/1', new Date(Date.now() + HOUR), message('l')));
    await clock.advance(200);
    expect(changes.map((c) => c.remote)).toEqual([true, false]);
    unsubscribe();
    await Promise.all([watching.close(), other.close()]);
  });
});
