import { waitFor } from '@duetime/conformance';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { type BatchMessage, NatsIo } from '../src/io.js';

// What the store's commit retry leans on: JetStream's duplicate detection (`Nats-Msg-Id`), across a crash of
// the server, on a NATS 2.15 server of the test's own. The store retries a commit whose reply was lost with
// the same message id, so that a batch stored already is refused as a duplicate. This shows the limit of
// that: the server rebuilds its duplicate table on start from the messages it still holds, so once the
// message that carried the id was rolled up (a schedule consumed or replaced), a retry that reaches a
// restarted server is stored again. A put whose reply was lost, delivered and consumed, then retried
// across a server restart, is scheduled twice (seen once in the outage loops of both store formats).

/** `write` retried until the restarted server's JetStream answers it (20 s at most). */
const untilRestarted = <T>(write: () => Promise<T>): Promise<NonNullable<T>> =>
  waitFor('the restarted server to take the write', write, { timeoutMs: 20_000, intervalMs: 100 });

describe('JetStream duplicate detection across a server crash', () => {
  let server: PrivateNatsServer | undefined;
  afterEach(async () => {
    await server?.dispose();
    server = undefined;
  });

  const id = () => {
    const h = headers();
    h.set('Nats-Msg-Id', 'commit-1');
    return h;
  };
  const rollup = () => {
    const h = headers();
    h.set('Nats-Rollup', 'sub');
    return h;
  };

  async function setUp(stream: string) {
    const nc = await connectNats(server!.url, { reconnectTimeWaitMs: 100 });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({
      name: stream,
      subjects: [`${stream}.>`],
      storage: 'file' as never,
      duplicate_window: 120_000_000_000,
      allow_rollup_hdrs: true,
    });
    return { nc, js: jetstream(nc) };
  }

  it('refuses a repeated message id while the server runs, even after its message was rolled up', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    const { nc, js } = await setUp('DEDUP');
    try {
      const first = await js.publish('DEDUP.a', 'put', { headers: id() });
      await js.publish('DEDUP.a', 'consumed', { headers: rollup() });
      const again = await js.publish('DEDUP.a', 'put', { headers: id() });
      expect(again.duplicate).toBe(true);
      expect(again.seq).toBe(first.seq);
    } finally {
      await nc.close();
    }
  });

  it('forgets a message id on restart once its message was rolled up: the repeat is stored again', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    const before = await setUp('DEDUPR');
    const first = await before.js.publish('DEDUPR.a', 'put', { headers: id() });
    await before.js
      .publish('DEDUPR.a', 'kept', { headers: id() })
      .then((ack) => expect(ack.duplicate).toBe(true));
    await before.js.publish('DEDUPR.a', 'consumed', { headers: rollup() });
    await before.nc.close();
    await server.restart(200);
    const nc = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    try {
      const js = jetstream(nc);
      const again = await untilRestarted(() => js.publish('DEDUPR.a', 'put', { headers: id() }));
      expect(again.duplicate).toBe(false);
      expect(again.seq).toBeGreaterThan(first.seq);
    } finally {
      await nc.close();
    }
  });

  it('keeps a message id across a restart while a marker carrying it is held (the commit marker, with a TTL)', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    const before = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    const jsm = await jetstreamManager(before);
    await jsm.streams.add({
      name: 'MARK',
      subjects: ['MARK.>'],
      storage: 'file' as never,
      duplicate_window: 120_000_000_000,
      allow_rollup_hdrs: true,
      allow_atomic: true,
      allow_msg_ttl: true,
      allow_direct: true,
    } as never);
    const batch: BatchMessage[] = [
      { subject: 'MARK.d', data: '', headers: { 'Nats-Msg-Id': 'commit-1', 'Nats-TTL': '130s' } },
      { subject: 'MARK.a', data: 'put' },
    ];
    const io = await NatsIo.open(before, 5000);
    expect(await io.atomicPublish(batch)).toMatchObject({ kind: 'stored', count: 2 });
    expect(await io.atomicPublish(batch)).toEqual({ kind: 'duplicate' });
    await jetstream(before).publish('MARK.a', 'consumed', { headers: rollup() });
    await before.close();
    await server.restart(200);
    const nc = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    try {
      const again = await NatsIo.open(nc, 5000);
      const result = await untilRestarted(() => again.atomicPublish(batch));
      expect(result).toEqual({ kind: 'duplicate' });
      expect(new TextDecoder().decode((await again.last('MARK', 'MARK.a'))?.data)).toBe('consumed');
    } finally {
      await nc.close();
    }
  });
});
