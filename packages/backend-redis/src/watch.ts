import type { Logger } from '@duetime/core';
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from './scripts.js';

export type ChangeListener = (change: { earliest?: Date }) => void;

/**
 * Remote change notifications over pub/sub. Each commit that puts schedules publishes its earliest deadline
 * and its sender's id (inside the commit script); a subscriber connection, a duplicate of the client, exists
 * only while someone listens. After a reconnection (which resubscribes), listeners hear a change without a
 * deadline, so a dispatcher rescans whatever it may have missed.
 */
export class ChangeWatcher {
  readonly #client: RedisClient;
  readonly #channel: string;
  readonly #senderId: string;
  readonly #connectionName: string | undefined;
  readonly #logger: Logger;
  readonly #listeners = new Set<ChangeListener>();
  #subscriber: Redis | Cluster | undefined;

  constructor(options: {
    client: RedisClient;
    channel: string;
    senderId: string;
    connectionName?: string;
    logger: Logger;
  }) {
    this.#client = options.client;
    this.#channel = options.channel;
    this.#senderId = options.senderId;
    this.#connectionName = options.connectionName;
    this.#logger = options.logger;
  }

  watch(listener: ChangeListener): () => void {
    this.#listeners.add(listener);
    if (!this.#subscriber) this.#subscribe();
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0) this.#stop();
    };
  }

  /** Drops every listener and the subscriber connection. */
  close(): void {
    this.#listeners.clear();
    this.#stop();
  }

  #subscribe(): void {
    // The subscriber waits for the server as long as it takes (no per-command retry limit): it is a
    // background channel, and the dispatcher's rescan covers the time it is down.
    // A cluster's duplicate takes `redisOptions` whole: keep the application's (password, TLS, name).
    const subscriber =
      this.#client instanceof Cluster
        ? this.#client.duplicate(undefined, {
            redisOptions: {
              ...this.#client.options.redisOptions,
              maxRetriesPerRequest: null,
              enableOfflineQueue: true,
            },
          })
        : this.#client.duplicate({
            maxRetriesPerRequest: null,
            enableOfflineQueue: true,
            lazyConnect: false,
            ...(this.#connectionName ? { connectionName: this.#connectionName } : {}),
          });
    this.#subscriber = subscriber;
    let readyBefore = false;
    subscriber.on('error', (error: Error) => {
      this.#logger.debug('redis change subscriber error', { error: error.message });
    });
    subscriber.on('ready', () => {
      if (readyBefore) {
        this.#logger.info('redis change subscriber reconnected; rescanning', { channel: this.#channel });
        this.#emit({});
      }
      readyBefore = true;
    });
    subscriber.on('message', (channel: string, payload: string) => {
      if (channel !== this.#channel) return;
      const space = payload.indexOf(' ');
      if (payload.slice(space + 1) === this.#senderId) return; // our own commit: core already told listeners
      const earliest = Number(payload.slice(0, space));
      this.#emit(Number.isFinite(earliest) ? { earliest: new Date(earliest) } : {});
    });
    subscriber.subscribe(this.#channel).catch((error: unknown) => {
      if (this.#subscriber === subscriber)
        this.#logger.warn('redis change subscription failed; relying on rescans', { error });
    });
  }

  #emit(change: { earliest?: Date }): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(change);
      } catch (error) {
        this.#logger.warn('redis change listener threw', { error });
      }
    }
  }

  #stop(): void {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    subscriber?.disconnect();
  }
}
