import type { Logger, WatchEvent } from '@duetime/core';
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from './scripts.js';

type Listener = (event: WatchEvent) => void;

/**
 * The push channel over pub/sub. Each commit that puts schedules publishes its earliest deadline and its
 * sender's id (inside the commit script); a subscriber connection, a duplicate of the client, exists only
 * while someone listens. Listeners hear `live` once subscribed (and again after each reconnection, which
 * resubscribes), `lost` when the connection drops, and other instances' commits as `change`.
 */
export class ChangeWatcher {
  readonly #listeners = new Set<Listener>();
  #subscriber: Redis | Cluster | undefined;

  constructor(
    readonly options: {
      client: RedisClient;
      channel: string;
      senderId: string;
      connectionName?: string;
      logger: Logger;
    },
  ) {}

  watch(listener: Listener): () => void {
    this.#listeners.add(listener);
    if (!this.#subscriber) this.#subscribe();
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0) this.close();
    };
  }

  /** Drops the subscriber connection (listeners hear nothing more). */
  close(): void {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    this.#listeners.clear();
    subscriber?.disconnect();
  }

  #subscribe(): void {
    const { client, channel, senderId, connectionName, logger } = this.options;
    // The subscriber waits for the server as long as it takes (no per-command retry limit): it is a
    // background channel, and `live` after a reconnection makes core look at the store again.
    // A cluster's duplicate takes `redisOptions` whole: keep the application's (password, TLS, name).
    const settings = { maxRetriesPerRequest: null, enableOfflineQueue: true };
    const subscriber =
      client instanceof Cluster
        ? client.duplicate(undefined, { redisOptions: { ...client.options.redisOptions, ...settings } })
        : client.duplicate({
            ...settings,
            lazyConnect: false,
            ...(connectionName ? { connectionName } : {}),
          });
    this.#subscriber = subscriber;
    let live = false;
    const emit = (event: WatchEvent) => {
      if (this.#subscriber !== subscriber) return;
      if (event.type !== 'change') live = event.type === 'live';
      for (const listener of [...this.#listeners]) {
        try {
          listener(event);
        } catch (error) {
          logger.warn('redis change listener threw', { error });
        }
      }
    };
    subscriber.on('error', (error: Error) => {
      logger.debug('redis change subscriber error', { error: error.message });
    });
    subscriber.on('close', () => {
      if (live) emit({ type: 'lost' });
    });
    subscriber.on('ready', () => {
      // ioredis resubscribes on reconnection; the first subscription reports itself below.
      if (!live && subscribed) emit({ type: 'live' });
    });
    subscriber.on('message', (from: string, payload: string) => {
      if (from !== channel) return;
      const space = payload.indexOf(' ');
      if (payload.slice(space + 1) === senderId) return; // our own commit: core already knows
      const earliest = Number(payload.slice(0, space));
      emit(Number.isFinite(earliest) ? { type: 'change', earliest: new Date(earliest) } : { type: 'change' });
    });
    let subscribed = false;
    subscriber.subscribe(channel).then(
      () => {
        subscribed = true;
        if (!live) emit({ type: 'live' });
      },
      (error: unknown) => {
        if (this.#subscriber === subscriber)
          logger.warn('redis change subscription failed; relying on rescans', { error });
      },
    );
  }
}
