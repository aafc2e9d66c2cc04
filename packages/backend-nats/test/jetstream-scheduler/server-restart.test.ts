import { PrivateNatsServer } from '@duetime/testing';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { JetStreamScheduler } from '../../src/jetstream-scheduler/index.js';
import { Collector } from './collector.js';
import { waitFor } from './helpers.js';

describe('JetStream scheduler across a server crash (private NATS 2.9 server)', () => {
  let server: PrivateNatsServer | undefined;
  let nc: NatsConnection | undefined;
  let scheduler: JetStreamScheduler | undefined;
  let collector: Collector | undefined;

  afterEach(async () => {
    await collector?.stop();
    await scheduler?.close();
    await nc?.close();
    await server?.dispose();
  });

  it('keeps firing after the server is killed and restarted: nothing lost, nothing fired twice', async () => {
    server = await PrivateNatsServer.start();
    nc = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    scheduler = new JetStreamScheduler(nc, { prefix: 'restart', mode: 'emulated', leaseTtl: 1_000 });
    await scheduler.ensureStream();
    collector = await Collector.start(scheduler, 'restart', 5, () => undefined, { retryDelay: 50 });

    const start = Date.now();
    const timers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => scheduler?.at(`job/${i}`, new Date(start + 300 + i * 100), i)),
    );
    await waitFor('the first timers', () => (collector?.calls.length ?? 0) >= 5);
    await server.restart();

    const expected = timers.map((t) => `once:${t?.timer}`);
    await waitFor(
      'every timer after the restart',
      () => expected.every((id) => collector?.firedIds().includes(id)),
      30_000,
    );
    const sequences = new Map<string, Set<number>>();
    for (const call of collector.calls) {
      const set = sequences.get(call.firedId) ?? new Set<number>();
      set.add(call.info.streamSequence);
      sequences.set(call.firedId, set);
    }
    for (const id of expected) expect(sequences.get(id)?.size, id).toBe(1);
  });
});
