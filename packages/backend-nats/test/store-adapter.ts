import { silentLogger } from '@duetime/core';
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
  options: Partial<Pick<NatsStoreContext, 'claimTtlMs' | 'fireAheadMs' | 'serverNow'>> = {},
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
    serverNow: async () => Date.now(),
    ...options,
  });
  return { adapter, io };
}

/** Closes the connections {@link storeAdapterOn} opened (call from afterEach or afterAll). */
export async function closeStoreAdapters(): Promise<void> {
  await Promise.all(connections.splice(0).map((nc) => nc.close()));
}
