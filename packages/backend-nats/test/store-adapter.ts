import { silentLogger } from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { ServerClock } from '../src/server-clock.js';
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
  options: Partial<Pick<NatsStoreContext, 'claims' | 'repairEveryMs' | 'repairGraceMs'>> = {},
): Promise<{ adapter: NatsStoreAdapter; io: NatsIo }> {
  const nc = await connectNats(NATS_STORE_URL);
  connections.push(nc);
  const io = await NatsIo.open(nc, 5000, 30_000);
  const l = layout(namespace);
  const meta = await readMeta(io, l);
  const clock = new ServerClock(io, l);
  const adapter = new NatsStoreAdapter({
    claims: { mode: 'off', ttlMs: 5000 },
    io,
    layout: l,
    versionBase: meta.versionBase,
    logger: silentLogger,
    origin: `test-${namespace}-${connections.length}`,
    serverNow: () => clock.now(),
    ...options,
  });
  return { adapter, io };
}

/** Closes the connections {@link storeAdapterOn} opened (call from afterEach or afterAll). */
export async function closeStoreAdapters(): Promise<void> {
  await Promise.all(connections.splice(0).map((nc) => nc.close()));
}
