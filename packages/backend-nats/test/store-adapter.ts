import { silentLogger } from '@duetime/core';
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { readMeta } from '../src/setup.js';
import { NatsStoreAdapter, type NatsStoreContext } from '../src/store/adapter.js';
import { NATS_STORE_URL } from './adapter.js';

const connections: NatsConnection[] = [];

/**
 * The store adapter of the backend under `namespace` (opened already) on a connection of its own, as
 * another process would have it: claims off unless `claims` says otherwise.
 */
export async function storeAdapterOn(
  namespace: string,
  options: Partial<
    Pick<NatsStoreContext, 'claimTtlMs' | 'fireAheadMs' | 'serverLatest' | 'logger' | 'timerCheckDelayMs'>
  > = {},
): Promise<{ adapter: NatsStoreAdapter; io: NatsIo }> {
  const nc = await connectNats(NATS_STORE_URL);
  connections.push(nc);
  const io = await NatsIo.open(nc, 5000, 30_000);
  const l = layout(namespace);
  const meta = await readMeta(io, l);
  const adapter = new NatsStoreAdapter({
    io,
    layout: l,
    versionBase: meta.versionBase,
    claimTtlMs: 5000,
    fireAheadMs: 500,
    logger: silentLogger,
    serverLatest: async () => Date.now(),
    ...options,
  });
  return { adapter, io };
}

/** Closes the connections {@link storeAdapterOn} opened (call from afterEach or afterAll). */
export async function closeStoreAdapters(): Promise<void> {
  await Promise.all(connections.splice(0).map((nc) => nc.close()));
}

/**
 * Makes every sweep of `io` receive what `deliver` makes of the server's delivery (the ordered consumer's
 * messages): a stand-in for a server that stalls, or for a replica that ends early.
 */
export function alterSweepDelivery(
  io: NatsIo,
  deliver: (real: ConsumerMessages) => AsyncIterable<JsMsg> & { stop(): void },
): void {
  const consumers = io.js.consumers;
  const get = consumers.get.bind(consumers);
  consumers.get = (async (...args: Parameters<typeof get>) => {
    const consumer = await get(...args);
    const consume = consumer.consume.bind(consumer);
    consumer.consume = (async (options?: Parameters<typeof consume>[0]) =>
      deliver(await consume(options))) as unknown as typeof consume;
    return consumer;
  }) as typeof get;
}
