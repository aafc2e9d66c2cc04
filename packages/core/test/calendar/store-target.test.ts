import { afterEach, describe, expect, it } from 'vitest';
import {
  calendarOccurrences,
  Dispatcher,
  every,
  type HandlerContext,
  type Invocation,
  type Message,
  storeTarget,
  storeTargetKey,
} from '../../src/index.js';
import { outcomes, records, T0, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;
const report = (inv: Invocation): Message => ({
  type: 'report.build',
  aggregateId: 'reports',
  data: { for: inv.intendedAt.toISOString() },
});

describe('storeTarget', () => {
  it('turns each occurrence into one durable message keyed by its occurrence id', async () => {
    world = new World();
    const { scheduler } = world.replica([every('report', MINUTE, storeTarget(world.backend.store, report))]);
    await world.advance(30_000 + 2 * MINUTE);
    const schedules = await world.backend.store.listSchedules();
    expect(schedules.map((s) => s.message.data)).toEqual([
      { for: new Date(T0).toISOString() },
      { for: new Date(T0 + MINUTE).toISOString() },
      { for: new Date(T0 + 2 * MINUTE).toISOString() },
    ]);
    const list = records(scheduler, 'report');
    expect(outcomes(list)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(schedules.map((s) => s.key)).toEqual(list.map((r) => `calendar/report/${r.occurrence}`));
    expect(schedules[0]?.at.getTime()).toBe(T0);
  });

  it('enqueues nothing when the same occurrence runs again, even after its message was delivered', async () => {
    world = new World();
    const { store } = world.backend;
    const handler = storeTarget(store, (inv) => ({ message: report(inv), at: new Date(T0 + 5 * MINUTE) }), {
      prefix: 'nightly/',
    });
    const invocation: Invocation = {
      schedule: 'report',
      occurrence: 'a'.repeat(32),
      intendedAt: new Date(T0),
      origin: 'scheduled',
    };
    const context: HandlerContext = { signal: new AbortController().signal, invocation };
    await handler(context);
    await handler(context);
    const key = storeTargetKey(invocation, 'nightly/');
    expect(key).toBe(`nightly/report/${'a'.repeat(32)}`);
    expect((await store.listSchedules()).map((s) => [s.key, s.at.getTime()])).toEqual([
      [key, T0 + 5 * MINUTE],
    ]);
    // Deliver it, then replay the occurrence: still one delivery in all.
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      clock: world.clock,
      processor: (_tx, m) => void delivered.push(m.type),
    });
    const running = dispatcher.run();
    await world.advance(6 * MINUTE);
    expect(delivered).toEqual(['report.build']);
    await handler(context);
    await world.advance(MINUTE);
    expect(await store.listSchedules()).toEqual([]);
    expect(delivered).toEqual(['report.build']);
    const marker = calendarOccurrences.fold(await store.loadEvents(`nightly/${'a'.repeat(32)}`));
    expect(marker).toEqual({ enqueued: true, key });
    const draining = dispatcher.drain();
    await world.advance(0);
    await draining;
    await running;
  });

  it('rejects a bad store, builder or prefix at declaration time', () => {
    world = new World();
    expect(() => storeTarget({} as never, report)).toThrow(/invalid store/);
    expect(() => storeTarget(world.backend.store, 'x' as never)).toThrow(/invalid build "x"/);
    expect(() => storeTarget(world.backend.store, report, { prefix: 'bad\u0000' })).toThrow(
      /options\.prefix/,
    );
  });
});
