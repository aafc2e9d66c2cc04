import { freshNamespace } from '@duetime/conformance';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll } from 'vitest';
import { connectNats, deleteNatsBackendData } from '../src/index.js';
import { NATS_STORE_URL } from './adapter.js';

/**
 * A connection to the store's server for the tests of one `describe` (opened before them, closed after),
 * and fresh stream prefixes whose data is deleted after them.
 */
export function storeConnection(): { readonly nc: NatsConnection; fresh(): string } {
  let nc: NatsConnection | undefined;
  const prefixes: string[] = [];
  beforeAll(async () => {
    nc = await connectNats(NATS_STORE_URL);
  });
  afterAll(async () => {
    if (!nc) return;
    for (const prefix of prefixes) await deleteNatsBackendData(nc, prefix).catch(() => {});
    await nc.close();
  });
  return {
    get nc() {
      if (!nc) throw new Error('the connection opens before the tests');
      return nc;
    },
    fresh() {
      const prefix = freshNamespace();
      prefixes.push(prefix);
      return prefix;
    },
  };
}
