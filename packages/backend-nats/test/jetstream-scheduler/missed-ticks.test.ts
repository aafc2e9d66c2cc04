import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Collector } from './collector.js';
import { connectRequired, Harness, OLD_URL, waitFor } from './helpers.js';

describe('JetStream scheduler, emulated cron while no pump runs (NATS 2.9)', () => {
  let nc: NatsConnection;
  let harness: Harness;
  let collector: Collector | undefined;

  beforeAll(async () => {
    nc = await connectRequired(OLD_URL);
    harness = new Harness(nc);
  });
  afterEach(async () => {
    await collector?.stop();
    await harness.cleanup();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('skips the ticks missed while no pump ran and goes on from the present', async () => {
    const writer = harness.scheduler({ mode: 'emulated', pump: false });
    const info = await writer.ensureStream();
    const defined = await writer.cron('every-second', 'tick', '* * * * * *', 'tick');
    // Let two ticks pass with no pump anywhere.
    await waitFor('two ticks to be missed', () => Date.now() > defined.next.getTime() + 1_500, 10_000);
    collector = await Collector.start(writer, 'ticks');

    const grace = 300;
    const pumpStarted = Date.now();
    const pump = harness.scheduler({ prefix: info.prefix, mode: 'emulated', missedTickGrace: grace });
    await pump.ensureStream();
    await waitFor('two ticks after the pump started', () => (collector?.firedIds().length ?? 0) >= 2, 15_000);

    const dues = (collector?.calls ?? []).map((c) => c.info.due?.getTime() ?? 0);
    expect(dues).not.toContain(defined.next.getTime());
    expect(dues).not.toContain(defined.next.getTime() + 1_000);
    for (const due of dues) expect(due).toBeGreaterThanOrEqual(pumpStarted - grace);
    expect(new Set(dues).size).toBe(dues.length);
  });

  it('deletes, unfired, a cron definition left under a newer one of the same name', async () => {
    const writer = harness.scheduler({ mode: 'emulated', pump: false });
    const info = await writer.ensureStream();
    const old = await writer.cron('dup', 'old/key', '* * * * * *', 'old');
    // What cron() leaves when its process dies between publishing a replacement and deleting the older
    // definition: a newer definition of the name, firing elsewhere, with the old one still under it.
    const jsm = await jetstreamManager(nc);
    const stored = await jsm.streams.getMessage(writer.stream, { seq: old.sequence });
    const h = headers();
    for (const [k, v] of stored?.header ?? []) for (const value of v) h.append(k, value);
    h.set('Duetime-Target', writer.fireSubject('new/key'));
    const newer = await jetstream(nc).publish(old.subject, stored?.data, { headers: h });
    collector = await Collector.start(writer, 'dup');
    const pump = harness.scheduler({ prefix: info.prefix, mode: 'emulated' });
    await pump.ensureStream();
    await waitFor(
      'two ticks of the newer definition',
      () => (collector?.firedIds('new/key').length ?? 0) >= 2,
    );
    expect(collector?.forKey('old/key')).toEqual([]);
    expect(await jsm.streams.getMessage(writer.stream, { seq: old.sequence })).toBeNull();
    expect((await jsm.streams.getMessage(writer.stream, { last_by_subj: old.subject }))?.seq).toBeGreaterThan(
      newer.seq,
    );
  });
});
