import { freshNamespace } from '@duetime/conformance';
import type { Backend, Message } from '@duetime/core';
import type { JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo, type StoredMessage } from '../src/io.js';
import { layout } from '../src/layout.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { NATS_CLUSTER_URLS } from './adapter-cluster.js';
import { alterSweepDelivery } from './store-adapter.js';

// On a stream with three replicas, a direct get or an ordered consumer may be served by a replica that
// has not yet applied the newest messages (the leader acknowledges a write once most replicas hold it).
// A listing or a prefix cancellation read there would miss what a transaction just committed. Every whole
// read ends by asking the leader for what follows its last message. The replica a little behind is
// played here by the client's reads stopping early, as a replica's would: nothing after a point, and
// nothing said to be pending.

const HOUR = 3_600_000;
const msg = (id: string): Message => ({ type: 'test', aggregateId: id });

describe('whole reads on a replicated stream', () => {
  const connections: NatsConnection[] = [];
  afterAll(async () => {
    await Promise.allSettled(connections.map((nc) => nc.close()));
    await deleteOpened();
  });

  /** `n` pending schedules on the cluster (three replicas), and an I/O of another process that knows it. */
  async function replicated(n: number): Promise<{ backend: Backend; io: NatsIo; namespace: string }> {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_CLUSTER_URLS, namespace, { replicas: 3 });
    await backend.store.transact(async (tx) => {
      for (let i = 0; i < n; i++) await tx.schedule(`r/${i}`, new Date(Date.now() + HOUR), msg(`r${i}`));
    });
    const nc = await connectNats(NATS_CLUSTER_URLS);
    connections.push(nc);
    const io = await NatsIo.open(nc, 10_000);
    expect((await io.streamInfo(layout(namespace).storeStream)).config.num_replicas).toBe(3);
    return { backend, io, namespace };
  }

  /** Counts the requests the leader answers for a read's tail. */
  function leaderReads(io: NatsIo): { count: number } {
    const counter = { count: 0 };
    const getMessage = io.jsm.streams.getMessage.bind(io.jsm.streams);
    io.jsm.streams.getMessage = (...args) => {
      counter.count++;
      return getMessage(...args);
    };
    return counter;
  }

  /** Record sequences, in the order a read yields them. */
  async function seqs(read: AsyncGenerator<StoredMessage>): Promise<number[]> {
    const out: number[] = [];
    for await (const m of read) out.push(m.seq);
    return out;
  }

  it('a streamed listing served by a replica that lacks the newest records still holds every record once', async () => {
    const { io, namespace } = await replicated(400);
    const l = layout(namespace);
    const whole = await seqs(io.scan(l.storeStream, l.recordFilter('')));
    expect(whole).toHaveLength(400);
    // The ordered consumer lands on a replica that holds the first 150 records: it sends those and says
    // nothing follows.
    alterSweepDelivery(io, (real) =>
      Object.assign(
        (async function* () {
          let n = 0;
          for await (const m of real) {
            n++;
            yield behind(m, n === 150);
            if (n === 150) return;
          }
        })(),
        { stop: () => real.stop() },
      ),
    );
    const leader = leaderReads(io);
    expect(await seqs(io.sweep(l.storeStream, l.recordFilter('')))).toEqual(whole);
    // The 250 the replica lacked, one request each (and one that finds nothing after them when other
    // messages of the stream follow the last record).
    expect(leader.count).toBeGreaterThanOrEqual(250);
    expect(leader.count).toBeLessThanOrEqual(251);
  }, 60_000);

  it('a scan (prefix cancellation, events) served by a replica that lacks the newest records holds them all', async () => {
    const { io, namespace } = await replicated(300);
    const l = layout(namespace);
    const leader = leaderReads(io);
    const whole = await seqs(io.scan(l.storeStream, l.recordFilter('')));
    expect(whole).toHaveLength(300);
    // Caught up: one request to the leader confirms that nothing follows.
    expect(leader.count).toBe(1);
    const range = io.range.bind(io);
    const upTo = whole[99] as number;
    io.range = async (stream, filter, from, limit) => {
      const answer = await range(stream, filter, from, limit);
      const messages = answer.messages.filter((m) => m.seq <= upTo);
      return { messages, pending: messages.length < answer.messages.length ? 0 : answer.pending };
    };
    leader.count = 0;
    expect(await seqs(io.scan(l.storeStream, l.recordFilter('')))).toEqual(whole);
    expect(leader.count).toBeGreaterThanOrEqual(200);
    expect(leader.count).toBeLessThanOrEqual(201);
  }, 60_000);

  it('asks no leader on a stream of one replica', async () => {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace);
    await backend.store.transact(async (tx) => {
      for (let i = 0; i < 20; i++) await tx.schedule(`one/${i}`, new Date(Date.now() + HOUR), msg(`o${i}`));
    });
    const nc = await connectNats(NATS_STORE_URL);
    connections.push(nc);
    const io = await NatsIo.open(nc, 10_000);
    const l = layout(namespace);
    expect((await io.streamInfo(l.storeStream)).config.num_replicas).toBe(1);
    const leader = leaderReads(io);
    expect(await seqs(io.sweep(l.storeStream, l.recordFilter('')))).toHaveLength(20);
    expect(await seqs(io.scan(l.storeStream, l.recordFilter('')))).toHaveLength(20);
    expect(leader.count).toBe(0);
  }, 60_000);
});

/** A delivered message as a replica holding nothing after it would send it: `last` says none pending. */
function behind(m: JsMsg, last: boolean): JsMsg {
  if (!last) return m;
  return new Proxy(m, {
    get(target, property) {
      if (property === 'info') return { ...target.info, pending: 0 };
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
