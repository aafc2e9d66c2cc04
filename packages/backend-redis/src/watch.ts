import type { Logger, WatchEvent } from '@duetime/core';
import { Cluster } from 'ioredis';
import type { RedisClient } from './scripts.js';

export interface WatchSettings {
  client: RedisClient;
  channel: string;
  senderId: string;
  connectionName?: string;
  logger: Logger;
}

/**
 * The push channel over pub/sub: a subscriber connection (a duplicate of the client) for one listener, until
 * the returned function stops it. Each commit that puts schedules publishes its earliest deadline and its
 * sender's id (inside the commit script). The listener hears `live` once subscribed (and again after each
 * reconnection, which resubscribes), `lost` when the connection drops, and other instances' commits.
 */
export function watchChanges(settings: WatchSettings, listener: (event: WatchEvent) => void): () => void {
  const { client, channel, senderId, connectionName, logger } = settings;
  // The subscriber waits for the server as long as it takes (no per-command retry limit): it is a
  // background channel, and `live` after a reconnection makes core look at the store again.
  // A cluster's duplicate takes `redisOptions` whole: keep the application's (password, TLS, name).
  const options = { maxRetriesPerRequest: null, enableOfflineQueue: true };
  const subscriber =
    client instanceof Cluster
      ? client.duplicate(undefined, { redisOptions: { ...client.options.redisOptions, ...options } })
      : client.duplicate({ ...options, lazyConnect: false, ...(connectionName ? { connectionName } : {}) });
  let stopped = false;
  let subscribed = false;
  let live = false;
  const emit = (event: WatchEvent) => {
    if (stopped) return;
    if (event.type !== 'change') live = event.type === 'live';
    try {
      listener(event);
    } catch (error) {
      logger.warn('redis change listener threw', { error });
    }
  };
  subscriber.on('error', (error: Error) =>
    logger.debug('redis change subscriber error', { error: error.message }),
  );
  subscriber.on('close', () => live && emit({ type: 'lost' }));
  // ioredis resubscribes on reconnection; the first subscription reports itself below.
  subscriber.on('ready', () => !live && subscribed && emit({ type: 'live' }));
  subscriber.on('message', (from: string, payload: string) => {
    const space = payload.indexOf(' ');
    // Our own commits: core already knows.
    if (from !== channel || payload.slice(space + 1) === senderId) return;
    const earliest = Number(payload.slice(0, space));
    emit(Number.isFinite(earliest) ? { type: 'change', earliest: new Date(earliest) } : { type: 'change' });
  });
  subscriber.subscribe(channel).then(
    () => {
      subscribed = true;
      if (!live) emit({ type: 'live' });
    },
    (error: unknown) => {
      if (!stopped) logger.warn('redis change subscription failed; relying on rescans', { error });
    },
  );
  return () => {
    stopped = true;
    subscriber.disconnect();
  };
}
