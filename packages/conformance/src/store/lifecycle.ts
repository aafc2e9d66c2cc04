import { InvalidArgumentError, MAX_KEY_LENGTH, MAX_MESSAGE_BYTES } from '@duetime/core';
import { expect, it } from 'vitest';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

const HOUR = 3_600_000;

/** Schedule lifecycle, versions (no ABA), prefixes, listing, atomicity and bad input. */
export function scheduleLifecycleTests({ harness, capabilities }: SuiteContext): void {
  it('creates, replaces and cancels a schedule; versions only grow, also after cancel (no ABA)', async () => {
    const { store } = await harness().open();
    const at = new Date(Date.now() + HOUR);
    await store.transact((tx) => tx.schedule('order/1/expire', at, effectMessage('o1', { n: 1 })));
    const v1 = await store.loadSchedule('order/1/expire');
    expect(v1).toMatchObject({
      key: 'order/1/expire',
      attempts: 0,
      message: effectMessage('o1', { n: 1 }),
    });
    // Versions come from a store-wide counter: positive integers, not necessarily consecutive.
    expect(Number.isSafeInteger(v1!.version) && v1!.version > 0).toBe(true);
    expect(v1?.at.getTime()).toBe(at.getTime());
    expect(v1?.dueAt.getTime()).toBe(at.getTime());

    const later = new Date(at.getTime() + 1000);
    await store.transact((tx) => tx.schedule('order/1/expire', later, effectMessage('o1', { n: 2 })));
    const v2 = await store.loadSchedule('order/1/expire');
    expect(v2!.version).toBeGreaterThan(v1!.version);
    expect(v2?.at.getTime()).toBe(later.getTime());
    expect(v2?.message.data).toEqual({ n: 2 });

    expect(await store.transact((tx) => tx.cancelSchedule('order/1/expire'))).toBe(true);
    expect(await store.loadSchedule('order/1/expire')).toBeUndefined();
    expect(await store.transact((tx) => tx.cancelSchedule('order/1/expire'))).toBe(false);
    expect(await store.transact((tx) => tx.cancelSchedule('never/scheduled'))).toBe(false);

    // Other keys' activity in between must not matter: a key's versions only grow.
    await store.transact((tx) => tx.schedule('other/key', at, effectMessage('o2')));
    await store.transact((tx) => tx.schedule('order/1/expire', at, effectMessage('o1', { n: 3 })));
    const v3 = await store.loadSchedule('order/1/expire');
    expect(v3!.version).toBeGreaterThan(v2!.version);
  });

  it('keeps keys with unusual characters apart and intact', async () => {
    const { store } = await harness().open();
    const keys = [
      'a b',
      'a/b',
      'a.b',
      'a*b',
      'a>b',
      "a'b",
      'a"b',
      'a%b',
      'a_b',
      'a\\b',
      'ключ/ü/🙂',
      'x'.repeat(MAX_KEY_LENGTH),
    ];
    const at = new Date(Date.now() + HOUR);
    await store.transact(async (tx) => {
      for (const [i, key] of keys.entries()) await tx.schedule(key, at, effectMessage(`k${i}`));
    });
    for (const [i, key] of keys.entries()) {
      expect((await store.loadSchedule(key))?.message.aggregateId).toBe(`k${i}`);
    }
    expect((await store.listSchedules()).map((s) => s.key).sort()).toEqual([...keys].sort());
  });

  it('cancels by literal prefix: a/flow/ never matches a/flowish, and pattern characters are literal', async () => {
    const { store } = await harness().open();
    const at = new Date(Date.now() + HOUR);
    const keys = [
      'a/flow/1',
      'a/flow/2',
      'a/flow/x/3',
      'a/flowish',
      'a/flo',
      'b/flow/1',
      'p%/1',
      'p%x/1',
      'p_/1',
      'pa/1',
      'p\\/1',
    ];
    await store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, at, effectMessage(key));
    });
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('a/flow/'))).toBe(3);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('p%/'))).toBe(1);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('p_'))).toBe(1);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('p\\'))).toBe(1);
    expect(await store.transact((tx) => tx.cancelSchedulePrefix('zzz/'))).toBe(0);
    expect((await store.listSchedules()).map((s) => s.key).sort()).toEqual([
      'a/flo',
      'a/flowish',
      'b/flow/1',
      'p%x/1',
      'pa/1',
    ]);
  });

  it('sees its own changes inside a transaction, in call order', async () => {
    const { store } = await harness().open();
    const at = new Date(Date.now() + HOUR);
    await store.transact((tx) => tx.schedule('t/old', at, effectMessage('x')));
    const counts = await store.transact(async (tx) => {
      await tx.schedule('t/new', at, effectMessage('y'));
      const seenNew = (await tx.loadSchedule('t/new'))?.message.aggregateId;
      const cancelled = await tx.cancelSchedulePrefix('t/');
      const afterCancel = await tx.loadSchedule('t/old');
      await tx.schedule('t/again', at, effectMessage('z'));
      return { seenNew, cancelled, afterCancel };
    });
    expect(counts).toEqual({ seenNew: 'y', cancelled: 2, afterCancel: undefined });
    expect((await store.listSchedules()).map((s) => s.key)).toEqual(['t/again']);
    expect(await store.loadSchedule('t/old')).toBeUndefined();
  });

  it(`lists active schedules through an instant, ordered by ${capabilities.dueOrder ? 'deadline' : 'key (dueOrder: false)'}, and pages without gaps or repeats`, async () => {
    const { store } = await harness().open();
    const base = Date.now() + HOUR;
    await store.transact(async (tx) => {
      for (let i = 0; i < 25; i++)
        await tx.schedule(
          `list/${String(i).padStart(2, '0')}`,
          new Date(base + (i % 5) * 1000),
          effectMessage(`l${i}`),
        );
    });
    const all = await store.listSchedules();
    expect(all).toHaveLength(25);
    for (let i = 1; i < all.length; i++) {
      const a = all[i - 1]!;
      const b = all[i]!;
      if (!capabilities.dueOrder) expect(a.key < b.key).toBe(true);
      else
        expect(a.at.getTime() < b.at.getTime() || (a.at.getTime() === b.at.getTime() && a.key < b.key)).toBe(
          true,
        );
    }
    const through = await store.listSchedules(new Date(base + 1000));
    expect(through).toHaveLength(10);
    expect(through.every((s) => s.at.getTime() <= base + 1000)).toBe(true);
    expect(await store.listSchedules(new Date(base - 1))).toEqual([]);

    const seen: string[] = [];
    let page = await store.pageSchedules({ limit: 4 });
    for (;;) {
      seen.push(...page.items.map((s) => s.key));
      if (!page.next) break;
      page = await store.pageSchedules({ limit: 4, after: page.next });
    }
    expect(seen).toEqual(all.map((s) => s.key));
    const prefixed = await store.pageSchedules({ prefix: 'list/1', limit: 100 });
    expect(prefixed.items.map((s) => s.key).sort()).toEqual([
      'list/10',
      'list/11',
      'list/12',
      'list/13',
      'list/14',
      'list/15',
      'list/16',
      'list/17',
      'list/18',
      'list/19',
    ]);
  });

  it('commits nothing when the function throws: no events, no schedules, no cancellations', async () => {
    const { store } = await harness().open();
    const at = new Date(Date.now() + HOUR);
    await store.transact((tx) => tx.schedule('keep/me', at, effectMessage('k')));
    const boom = new Error('boom');
    await expect(
      store.transact(async (tx) => {
        await tx.exec(effects, 'rollback-agg', (_s, ag) => ag.raise('effect.applied'));
        await tx.schedule('rolled/back', at, effectMessage('r'));
        await tx.cancelSchedule('keep/me');
        await tx.cancelSchedulePrefix('keep/');
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await store.loadEvents('rollback-agg')).toEqual([]);
    expect(await store.loadSchedule('rolled/back')).toBeUndefined();
    expect((await store.loadSchedule('keep/me'))?.message.aggregateId).toBe('k');
  });

  it('appends events with sequences and timestamps, and folds them into state', async () => {
    const { store } = await harness().open();
    const state = await store.transact((tx) =>
      tx.exec(effects, 'agg-1', (s, ag) => {
        expect(s).toBe(0);
        ag.raise('effect.applied', { i: 1 });
        ag.raise('effect.applied', { i: 2 });
        expect(ag.state).toBe(2);
        expect(ag.sequence).toBe(2);
      }),
    );
    expect(state).toBe(2);
    const again = await store.transact((tx) =>
      tx.exec(effects, 'agg-1', (_s, ag) => ag.raise('effect.applied')),
    );
    expect(again).toBe(3);
    const events = await store.loadEvents('agg-1');
    expect(events.map((e) => [e.sequence, e.type, e.aggregateId])).toEqual([
      [1, 'effect.applied', 'agg-1'],
      [2, 'effect.applied', 'agg-1'],
      [3, 'effect.applied', 'agg-1'],
    ]);
    expect(events[0]?.data).toEqual({ i: 1 });
    expect(typeof events[0]?.timestamp).toBe('number');
  });

  it('retries optimistic conflicts on one aggregate until every transaction converges', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const writers = Array.from({ length: 10 }, (_, i) =>
      (i % 2 === 0 ? first : second).store.transact(
        (tx) => tx.exec(effects, 'contended', (_s, ag) => ag.raise('effect.applied', { writer: i })),
        { maxRetries: 50 },
      ),
    );
    await Promise.all(writers);
    const events = await first.store.loadEvents('contended');
    expect(events.map((e) => e.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(new Set(events.map((e) => (e.data as { writer: number }).writer)).size).toBe(10);
  });

  it('rejects bad input with typed errors naming the field, and commits nothing', async () => {
    const { store } = await harness().open();
    const at = new Date(Date.now() + HOUR);
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    const cases: [string, (tx: Parameters<Parameters<typeof store.transact>[0]>[0]) => Promise<unknown>][] = [
      ['key', (tx) => tx.schedule('', at, effectMessage('x'))],
      ['key', (tx) => tx.schedule('x'.repeat(MAX_KEY_LENGTH + 1), at, effectMessage('x'))],
      ['key', (tx) => tx.schedule('bad\nkey', at, effectMessage('x'))],
      ['key', (tx) => tx.schedule('bad\u0000key', at, effectMessage('x'))],
      ['key', (tx) => tx.schedule(42 as unknown as string, at, effectMessage('x'))],
      ['message.type', (tx) => tx.schedule('k', at, { aggregateId: 'a' } as never)],
      ['message.aggregateId', (tx) => tx.schedule('k', at, { type: 't', aggregateId: '' })],
      ['message.aggregateId', (tx) => tx.schedule('k', at, { type: 't', aggregateId: 7 } as never)],
      ['message', (tx) => tx.schedule('k', at, null as never)],
      ['at', (tx) => tx.schedule('k', new Date(Number.NaN), effectMessage('x'))],
      ['at', (tx) => tx.schedule('k', '2026-01-01' as unknown as Date, effectMessage('x'))],
      ['message.data.f', (tx) => tx.schedule('k', at, effectMessage('x', { f: () => 1 }))],
      ['message.data.n', (tx) => tx.schedule('k', at, effectMessage('x', { n: 10n }))],
      ['message.data.self', (tx) => tx.schedule('k', at, effectMessage('x', circular))],
      ['message.data.d', (tx) => tx.schedule('k', at, effectMessage('x', { d: new Date() }))],
      ['message.data.x', (tx) => tx.schedule('k', at, effectMessage('x', { x: Number.NaN }))],
      ['message', (tx) => tx.schedule('k', at, effectMessage('x', 'y'.repeat(MAX_MESSAGE_BYTES)))],
      ['prefix', (tx) => tx.cancelSchedulePrefix('bad\u0007')],
      ['key', (tx) => tx.cancelSchedule('')],
      ['aggregateId', (tx) => tx.exec(effects, '', () => {})],
      ['event.type', (tx) => tx.exec(effects, 'a', (_s, ag) => ag.raise('not.handled'))],
    ];
    for (const [field, call] of cases) {
      const error = await store
        .transact(async (tx) => {
          await tx.schedule('committed/never', at, effectMessage('x'));
          await call(tx);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error, `expected an InvalidArgumentError for ${field}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      expect((error as InvalidArgumentError).code).toBe('DUETIME_INVALID_ARGUMENT');
    }
    await expect(store.listSchedules('soon' as unknown as Date)).rejects.toMatchObject({ field: 'through' });
    await expect(store.loadSchedule('')).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.listSchedules()).toEqual([]);
    expect(await store.loadEvents('a')).toEqual([]);
  });

  it('accepts a message of exactly the documented size limit', async () => {
    const { store } = await harness().open();
    const overhead = Buffer.byteLength(JSON.stringify(effectMessage('big', '')));
    const data = 'y'.repeat(MAX_MESSAGE_BYTES - overhead);
    await store.transact((tx) => tx.schedule('big', new Date(Date.now() + HOUR), effectMessage('big', data)));
    expect((await store.loadSchedule('big'))?.message.data).toBe(data);
  });
}

/** Data written by one instance is seen by another on the same data, and survives reopening. */
export function sharingTests({ harness, capabilities }: SuiteContext): void {
  it('sees a schedule replaced from a second backend instance on the same data', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const at = new Date(Date.now() + HOUR);
    await first.store.transact((tx) => tx.schedule('shared/1', at, effectMessage('s', { from: 'first' })));
    const v1 = (await second.store.loadSchedule('shared/1'))!.version;
    await second.store.transact((tx) => tx.schedule('shared/1', at, effectMessage('s', { from: 'second' })));
    const seen = await first.store.loadSchedule('shared/1');
    expect(seen).toMatchObject({ message: { data: { from: 'second' } } });
    expect(seen!.version).toBeGreaterThan(v1);
  });

  if (capabilities.durable) {
    it('keeps schedules and events after the backend is closed and opened again', async () => {
      const first = await harness().open();
      const at = new Date(Date.now() + HOUR);
      await first.store.transact(async (tx) => {
        await tx.schedule('durable/1', at, effectMessage('d'));
        await tx.exec(effects, 'd', (_s, ag) => ag.raise('effect.applied'));
      });
      await first.close();
      const again = await harness().open(first.namespace);
      expect((await again.store.loadSchedule('durable/1'))?.message.aggregateId).toBe('d');
      expect(await appliedCount(again.store, 'd')).toBe(1);
    });
  }
}
