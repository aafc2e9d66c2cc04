import { connect as connectTcp, createServer, type Server, type Socket } from 'node:net';
import { freshNamespace, waitFor } from '@duetime/conformance';
import type { Backend, Message, Schedule } from '@duetime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { bucketOf, layout } from '../src/layout.js';
import type { NatsStoreAdapter } from '../src/store/adapter.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { closeStoreAdapters, storeAdapterOn } from './store-adapter.js';

/**
 * The due index must never leave a due schedule behind: whatever deliveries do meanwhile, a pending
 * schedule whose due time has passed is found by the process that wrote it and by any other.
 */

const msg = (id: string): Message => ({ type: 'test', aggregateId: id });

/** Claims what is due now (at most `limit`) and gives it back: the keys found. */
async function peek(adapter: NatsStoreAdapter, limit = 100): Promise<Schedule[]> {
  const unit = await adapter.begin({ now: new Date(), limit });
  await adapter.rollback(unit);
  return [...(unit.claimed ?? [])];
}

describe('nats due index recovery', () => {
  const backends: Backend[] = [];
  async function open(): Promise<Backend & { namespace: string }> {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace);
    backends.push(backend);
    return Object.assign(backend, { namespace });
  }
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((b) => b.close()));
    await closeStoreAdapters();
  });
  afterAll(deleteOpened, 60_000);

  it('keeps the entry of a schedule put again into another second while its earlier version is being delivered', async () => {
    const { store, namespace } = await open();
    const { adapter } = await storeAdapterOn(namespace);
    // Two seconds in the past, far enough apart to be two due-index subjects.
    const first = Math.floor((Date.now() - 60_000) / 1000) * 1000 + 100;
    const second = first + 5000;
    await store.transact((tx) => tx.schedule('k', new Date(first), msg('k1')));
    await store.transact((tx) => tx.schedule('j', new Date(second), msg('j')));

    // A delivery claims k's first version (the earliest due) and is still running...
    const slow = await adapter.begin({ now: new Date(), limit: 1 });
    expect(slow.claimed?.map((s) => s.key)).toEqual(['k']);
    // ...when k is put again, due in the second of j (its entry after j's there).
    await store.transact((tx) => tx.schedule('k', new Date(second + 200), msg('k2')));
    expect(bucketOf(second + 200)).toEqual(bucketOf(second));

    // Another delivery reads that second: it takes j, and must not take k's new entry for one of its own.
    const other = await adapter.begin({ now: new Date(), limit: 10 });
    expect(other.claimed?.map((s) => s.key)).toEqual(['j']);
    const rejected = await adapter.commit(other, {
      writes: [],
      settlements: (other.claimed ?? []).map((s) => ({ schedule: s, writes: [], outcome: 'consume' })),
    });
    expect(rejected.size).toBe(0);
    // The slow delivery ends: k's first version was replaced, so its consumption is refused.
    const refused = await adapter.commit(slow, {
      writes: [],
      settlements: (slow.claimed ?? []).map((s) => ({ schedule: s, writes: [], outcome: 'consume' })),
    });
    expect([...refused.keys()]).toEqual(['k']);

    // k's second version is pending and due: this process finds it...
    expect((await store.loadSchedule('k'))?.dueAt).toEqual(new Date(second + 200));
    const here = await peek(adapter);
    expect(here.map((s) => [s.key, s.dueAt.getTime()])).toEqual([['k', second + 200]]);
    // ...and so does another, once every purge this one started is over.
    await adapter.close();
    const { adapter: fresh } = await storeAdapterOn(namespace);
    const there = await peek(fresh);
    expect(there.map((s) => [s.key, s.dueAt.getTime()])).toEqual([['k', second + 200]]);
    expect(await store.nextDueAt()).toEqual(new Date(second + 200));
  }, 60_000);

  it('finds a due schedule whose due-index entry and hour marker are gone (the reconciliation sweep)', async () => {
    const { store, namespace } = await open();
    const { io } = await storeAdapterOn(namespace);
    const l = layout(namespace);
    const due = Date.now() - 30_000;
    await store.transact((tx) => tx.schedule('lost/1', new Date(due), msg('l')));
    await store.transact((tx) => tx.schedule('kept/1', new Date(due + 10), msg('k')));
    // The index loses both (as if purged by mistake): the records alone say they are due.
    await io.purge(l.storeStream, { filter: `${namespace}.q.>` });
    await io.purge(l.storeStream, { filter: `${namespace}.h.>` });
    const { adapter: unrepaired } = await storeAdapterOn(namespace);
    expect(await peek(unrepaired)).toEqual([]);
    const { adapter } = await storeAdapterOn(namespace, { repairEveryMs: 200, repairGraceMs: 1000 });
    let found: string[] = [];
    await waitFor(
      'the sweep to find both due schedules again',
      async () => {
        found = (await peek(adapter)).map((s) => s.key).sort();
        return found.length === 2;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(found).toEqual(['kept/1', 'lost/1']);
    // Repaired in the index itself: another process finds them at once.
    const { adapter: fresh } = await storeAdapterOn(namespace);
    expect((await peek(fresh)).map((s) => s.key).sort()).toEqual(['kept/1', 'lost/1']);
  }, 60_000);
});

/**
 * A TCP relay in front of the store's server that, once armed, passes `bytes` more bytes of the server's
 * answers and then cuts every connection (new ones pass, so the client reconnects).
 */
class CuttingRelay {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #armed: number | undefined;
  cuts = 0;

  private constructor(server: Server) {
    this.#server = server;
  }

  static async start(upstream: URL): Promise<CuttingRelay> {
    const server = createServer();
    const relay = new CuttingRelay(server);
    server.on('connection', (client) => relay.#relay(client, upstream));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return relay;
  }

  get url(): string {
    const address = this.#server.address();
    if (!address || typeof address === 'string') throw new Error('the relay is not listening');
    return `nats://127.0.0.1:${address.port}`;
  }

  /** Passes `bytes` more bytes of answers, then cuts every connection. */
  arm(bytes: number): void {
    this.#armed = bytes;
  }

  #relay(client: Socket, upstream: URL): void {
    const server = connectTcp(Number(upstream.port), upstream.hostname);
    this.#sockets.add(client).add(server);
    const end = () => {
      client.destroy();
      server.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(server);
    };
    client.on('data', (chunk) => server.write(chunk));
    server.on('data', (chunk: Buffer) => {
      if (this.#armed === undefined) return void client.write(chunk);
      if (chunk.length < this.#armed) {
        this.#armed -= chunk.length;
        return void client.write(chunk);
      }
      client.write(chunk.subarray(0, this.#armed), () => {
        this.#armed = undefined;
        this.cuts++;
        for (const socket of this.#sockets) socket.destroy();
        this.#sockets.clear();
      });
    });
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

describe('nats reads across a connection cut', () => {
  afterAll(deleteOpened, 60_000);

  it('a batch read whose answer is cut off after its first messages is sent again: whole, never partial, never waited for forever', async () => {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace);
    const relay = await CuttingRelay.start(new URL(NATS_STORE_URL));
    const nc = await connectNats(relay.url);
    try {
      const io = await NatsIo.open(nc, 2000);
      const l = layout(namespace);
      // An answer of about 1.3 MB: many TCP chunks, so a cut after 200 kB leaves the client a few
      // messages and no end of batch.
      const subject = `${namespace}.q.1.1`;
      const body = JSON.stringify([['x'.repeat(64_000), 0]]);
      for (let i = 0; i < 20; i++) await io.publish(subject, body);
      relay.arm(200_000);
      const read = io.range(l.storeStream, subject, 1, 1000);
      let result: { messages: unknown[] } | undefined;
      let failure: unknown;
      read.then(
        (r) => {
          result = r;
        },
        (error: unknown) => {
          failure = error;
        },
      );
      await waitFor('the cut read to end', () => result !== undefined || failure !== undefined, {
        timeoutMs: 60_000,
        intervalMs: 50,
      });
      expect(relay.cuts).toBe(1);
      expect(failure).toBeUndefined();
      expect(result?.messages).toHaveLength(20);
    } finally {
      await nc.close();
      await relay.close();
      await backend.close();
    }
  }, 90_000);
});
