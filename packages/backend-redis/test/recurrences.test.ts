import {
  CorruptDataError,
  intervalFrom,
  recurring,
  type Settlement,
  type StoredRecurrence,
} from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { encodeCommit } from '../src/commit.js';
import { ScriptRunner } from '../src/scripts.js';
import { message, openAdapter, redisFixture } from './helpers.js';

const HOUR = 3_600_000;
const fx = redisFixture();

/** A recurrence starting an hour from now, hourly. */
function hourly(): { start: number; recurrence: ReturnType<typeof recurring> } {
  const start = Math.ceil((Date.now() + HOUR) / 1000) * 1000;
  return { start, recurrence: recurring(intervalFrom(HOUR, new Date(start)), { startAt: new Date(start) }) };
}

describe('recurring schedules', () => {
  it('keep their recurrence in the schedule’s value, returned by every read', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const { start, recurrence } = hourly();
    await store.transact((tx) => tx.schedule('r/1', recurrence, message('r')));
    const loaded = (await store.loadSchedule('r/1'))!;
    const stored: StoredRecurrence = {
      v: 1,
      spec: { kind: 'interval', everyMs: HOUR, anchor: start },
      startAt: start,
      catchUp: 'latest',
      grace: 60_000,
      count: 0,
    };
    expect(loaded).toMatchObject({ key: 'r/1', recurrence: stored, message: message('r') });
    expect(loaded.at.getTime()).toBe(start);
    const json = JSON.stringify(loaded.recurrence);
    expect(await fx.admin.hget(k.schedules, 'r/1')).toBe(
      `${loaded.version} ${start} ${start} 0 r${Buffer.byteLength(json)} ${json} ${JSON.stringify(message('r'))}`,
    );
    expect((await store.listSchedules())[0]?.recurrence).toEqual(stored);
    expect((await store.pageSchedules({ prefix: 'r/' })).items[0]?.recurrence).toEqual(stored);
    const later = new Date(start + 1);
    const adapter = await openAdapter(fx, prefix);
    expect((await adapter.listSchedules({ order: 'due', through: later, limit: 10 }))[0]?.recurrence).toEqual(
      stored,
    );
    expect(await adapter.listSchedules({ order: 'key', recurring: false, limit: 10 })).toEqual([]);
    const heads = await adapter.listSchedules({ order: 'at', recurring: true, select: 'heads', limit: 10 });
    expect(heads).toEqual([
      { key: 'r/1', at: loaded.at, dueAt: loaded.dueAt, version: loaded.version, attempts: 0 },
    ]);
    const unit = await adapter.begin({ now: later, limit: 10 });
    expect(unit.claimed?.[0]?.recurrence).toEqual(stored);
    await adapter.rollback(unit);
    // A one-shot schedule written over it has none: the value is the plain form again.
    await store.transact((tx) => tx.schedule('r/1', new Date(start), message('r')));
    expect((await store.loadSchedule('r/1'))?.recurrence).toBeUndefined();
    expect(await fx.admin.hget(k.schedules, 'r/1')).toMatch(new RegExp(`^\\d+ ${start} ${start} 0 \\{`));
  });

  it('arm the next occurrence with the consumption, unless the key was written again; a failure may move `at`', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const { start, recurrence } = hourly();
    await store.transact(async (tx) => {
      await tx.schedule('arm/me', recurrence, message('a'));
      await tx.schedule('arm/not', recurrence, message('b'));
      await tx.schedule('arm/late', recurrence, message('c'));
    });
    const now = new Date(start + 1);
    const adapter = await openAdapter(fx, prefix);
    const unit = await adapter.begin({ now, limit: 10 });
    const byKey = new Map(unit.claimed!.map((s) => [s.key, s]));
    const next = { ...(byKey.get('arm/me')!.recurrence as StoredRecurrence), count: 1 };
    const rearm = { at: new Date(start + HOUR), recurrence: next };
    const settlements: Settlement[] = [
      { schedule: byKey.get('arm/me')!, outcome: 'consume', next: rearm, writes: [] },
      // The processor of arm/not wrote its key again: that schedule wins over the rearm.
      {
        schedule: byKey.get('arm/not')!,
        outcome: 'consume',
        next: rearm,
        writes: [
          {
            op: 'put',
            key: 'arm/not',
            at: new Date(start + 5 * HOUR),
            message: message('b', { replaced: true }),
          },
        ],
      },
      // arm/late failed on a later occurrence than its `at` (its catch-up moved on): `at` follows.
      {
        schedule: byKey.get('arm/late')!,
        outcome: 'retry',
        failure: {
          attempts: 1,
          dueAt: new Date(start + 3 * HOUR),
          error: 'Error: late – 😀',
          at: new Date(start + 2 * HOUR),
        },
        writes: [],
      },
    ];
    expect(await adapter.commit(unit, { writes: [], settlements })).toEqual(new Map());

    const me = (await store.loadSchedule('arm/me'))!;
    expect(me).toMatchObject({ recurrence: next, attempts: 0, message: message('a') });
    expect(me.at.getTime()).toBe(start + HOUR);
    expect(me.version).toBeGreaterThan(byKey.get('arm/me')!.version);
    const not = (await store.loadSchedule('arm/not'))!;
    expect(not.recurrence).toBeUndefined();
    expect(not.message).toEqual(message('b', { replaced: true }));
    const late = (await store.loadSchedule('arm/late'))!;
    expect(late).toMatchObject({
      version: byKey.get('arm/late')!.version,
      attempts: 1,
      lastError: 'Error: late – 😀',
      recurrence: byKey.get('arm/late')!.recurrence,
    });
    expect(late.at.getTime()).toBe(start + 2 * HOUR);
    expect(late.dueAt.getTime()).toBe(start + 3 * HOUR);
    expect(Number(await fx.admin.zscore(k.at, 'arm/late'))).toBe(start + 2 * HOUR);
    expect(Number(await fx.admin.zscore(k.due, 'arm/late'))).toBe(start + 3 * HOUR);
    expect(
      (await store.pageSchedules({ through: new Date(start + 2 * HOUR) })).items.map((s) => s.key),
    ).toEqual(['arm/me', 'arm/late']);
    // A second failure replaces the error, keeping the recurrence and `at`.
    const again = await adapter.begin({ now: new Date(start + 3 * HOUR), limit: 10 });
    const retried = again.claimed!.map(
      (schedule): Settlement =>
        schedule.key === 'arm/late'
          ? {
              schedule,
              outcome: 'retry',
              failure: { attempts: 2, dueAt: new Date(start + 4 * HOUR), error: 'x' },
              writes: [],
            }
          : { schedule, outcome: 'release', writes: [] },
    );
    expect(await adapter.commit(again, { writes: [], settlements: retried })).toEqual(new Map());
    expect(await store.loadSchedule('arm/late')).toMatchObject({
      attempts: 2,
      lastError: 'x',
      recurrence: late.recurrence,
    });
    expect((await store.loadSchedule('arm/late'))?.at.getTime()).toBe(start + 2 * HOUR);
  });

  it('read values of the plain form, refuse a field of a newer version by name, and keep it when a failure rewrites the value', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const m = JSON.stringify(message('p'));
    await fx.admin.hset(k.schedules, 'plain', `7 1000 2000 1 ${m}`);
    expect(await store.loadSchedule('plain')).toMatchObject({
      version: 7,
      attempts: 1,
      message: message('p'),
    });
    expect((await store.loadSchedule('plain'))?.lastError).toBeUndefined();

    await fx.admin.hset(k.schedules, 'newer', `8 1000 1000 0 x3 abc ${m}`);
    await expect(store.loadSchedule('newer')).rejects.toThrow(
      /field "newer" holds a field \(x\).*newer version/,
    );
    await expect(store.loadSchedule('newer')).rejects.toBeInstanceOf(CorruptDataError);
    await fx.admin.hset(k.schedules, 'bad-length', `9 1000 1000 0 e99 short ${m}`);
    await expect(store.loadSchedule('bad-length')).rejects.toThrow(/does not hold a duetime schedule/);
    await fx.admin.hset(k.schedules, 'bad-recurrence', `10 1000 1000 0 r8 {"v":99} ${m}`);
    await expect(store.loadSchedule('bad-recurrence')).rejects.toBeInstanceOf(CorruptDataError);

    // The commit script keeps fields it does not know (and replaces the error) when it records a failure.
    const runner = new ScriptRunner(fx.admin);
    const { keys, args } = encodeCommit(
      { keys: k, markerTtl: 60_000, senderId: 'test' },
      'fail-newer',
      { token: '', claimed: [] },
      () => [['fail', 'newer', 8, 1, 5000, '', 'é']],
    );
    await fx.admin.hset(k.schedules, 'newer', `8 1000 1000 0 x3 abc e3 old ${m}`);
    expect(await runner.run('commit', keys, args)).toEqual(['ok']);
    expect(await fx.admin.hget(k.schedules, 'newer')).toBe(`8 1000 5000 1 x3 abc e2 é ${m}`);
  });
});
