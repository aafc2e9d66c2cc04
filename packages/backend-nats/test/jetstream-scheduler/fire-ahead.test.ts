import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Collector } from './collector.js';
import { connectRequired, Harness, NEW_URL, newServer, reportNotRun, waitFor } from './helpers.js';

// `fireAheadMs`: the server fires a one-shot timer early and consumeFired holds it until it is due.
// Needs message schedules (NATS >= 2.12): the native mode.
if (!newServer.available) reportNotRun('JetStream scheduler, fireAheadMs', newServer.reason);

describe('JetStream scheduler, fireAheadMs (native)', () => {
  let nc: NatsConnection;
  let harness: Harness;
  const collectors: Collector[] = [];

  beforeAll(async () => {
    if (!newServer.available)
      throw new Error(`${newServer.reason}; start it with 'bash scripts/services.sh up --clusters'`);
    nc = await connectRequired(NEW_URL);
    harness = new Harness(nc);
  });
  afterEach(async () => {
    await Promise.all(collectors.splice(0).map((c) => c.stop()));
    await harness.cleanup();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('schedules the fire early, and the handler still runs no sooner than the due instant', async () => {
    const scheduler = harness.scheduler({ mode: 'native', fireAheadMs: 2_000 });
    const timer = await scheduler.after('ahead/1', 3_000, 'x');
    const jsm = await jetstreamManager(nc);
    const stored = await jsm.streams.getMessage(scheduler.stream, { seq: timer.sequence });
    expect(stored?.header.get('Nats-Schedule')).toBe(
      `@at ${new Date(timer.due.getTime() - 2_000).toISOString()}`,
    );
    expect(stored?.header.get('Duetime-Due')).toBe(String(timer.due.getTime()));

    const c = await Collector.start(scheduler, 'ahead');
    collectors.push(c);
    // The fire is stored before the due instant: the server fired it early.
    const fired = await waitFor('the early fire', async () => {
      const m = await jsm.streams
        .getMessage(scheduler.stream, { last_by_subj: scheduler.fireSubject('ahead/1') })
        .catch(() => null);
      return m ?? undefined;
    });
    expect(fired?.timestamp ? Date.parse(fired.timestamp) : Number.NaN).toBeLessThan(timer.due.getTime());
    await waitFor('the handler', () => c.calls.length > 0);
    expect(c.calls[0]?.at).toBeGreaterThanOrEqual(timer.due.getTime());
    expect(c.calls[0]?.firedId).toBe(`once:${timer.timer}`);
    expect(c.calls).toHaveLength(1);
  });

  it('a message held until it is due takes no handler slot from one due sooner', async () => {
    const scheduler = harness.scheduler({ mode: 'native', fireAheadMs: 5_000 });
    const c = await Collector.start(scheduler, 'slots', 5, () => undefined, { concurrency: 1 });
    collectors.push(c);
    // `late` (due in 6 s, fired 5 s ahead) is held; `soon`, put then, is due 2 s before it and fires at
    // once. With one slot, `late` waiting in it would run `soon` only after itself.
    const late = await scheduler.after('late', 6_000, 'late');
    const jsm = await jetstreamManager(nc);
    await waitFor('the consumer to hold late', async () => {
      const info = await jsm.consumers.info(scheduler.stream, 'slots');
      return info.num_ack_pending === 1 || undefined;
    });
    expect(c.calls).toHaveLength(0);
    const soon = await scheduler.at('soon', new Date(late.due.getTime() - 2_000), 'soon');
    await waitFor('both handlers', () => c.calls.length >= 2);
    expect(c.calls.map((call) => call.key)).toEqual(['soon', 'late']);
    expect(c.calls[0]!.at).toBeGreaterThanOrEqual(soon.due.getTime());
    expect(c.calls[1]!.at).toBeGreaterThanOrEqual(late.due.getTime());
  });

  it('a consumer stopped while it holds a message gives it back, and another runs it when due', async () => {
    const scheduler = harness.scheduler({ mode: 'native', fireAheadMs: 5_500 });
    const first = await Collector.start(scheduler, 'handover');
    const timer = await scheduler.after('handover/1', 6_000, 'h');
    const jsm = await jetstreamManager(nc);
    // Held by the first consumer: delivered, not acknowledged.
    await waitFor('the first consumer to hold it', async () => {
      const info = await jsm.consumers.info(scheduler.stream, 'handover');
      return info.num_ack_pending === 1 || undefined;
    });
    await first.stop();
    expect(first.calls).toHaveLength(0);
    const second = await Collector.start(scheduler, 'handover');
    collectors.push(second);
    await waitFor('the second consumer to run it', () => second.calls.length > 0);
    expect(second.calls[0]?.at).toBeGreaterThanOrEqual(timer.due.getTime());
    expect(second.calls[0]?.firedId).toBe(`once:${timer.timer}`);
    expect(second.calls).toHaveLength(1);
  });
});
