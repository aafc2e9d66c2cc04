import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, Dispatcher } from '@duetime/core';
import { natsStreamBytes, pgSchemaBytes, redisKeyBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  NATS_URL,
  PG_URL,
  payload,
  type Queue,
  REDIS_URL,
  type Subject,
  uniqueName,
} from './types.js';

export type DuetimeBackendName = 'sqlite' | 'postgres' | 'redis' | 'nats';

export const DUETIME_BACKENDS: DuetimeBackendName[] = ['sqlite', 'postgres', 'redis', 'nats'];

export interface OpenOptions extends CreateOptions {
  /** SQLite only: `synchronous` (the backend's default is `full`). */
  synchronous?: 'full' | 'normal';
}

export interface OpenedDuetime {
  backend: Backend;
  namespace: string;
  /** Bytes the server (or file) holds for this namespace. */
  storageBytes(): Promise<number>;
  /** Removes the namespace's data; close the backend first. */
  drop(): Promise<void>;
}

/** Opens a duetime backend on fresh, isolated data (or on `namespace`, to reopen it in another process). */
export async function openDuetime(
  kind: DuetimeBackendName,
  namespace: string = uniqueName('bench'),
  options: OpenOptions = {},
): Promise<OpenedDuetime> {
  switch (kind) {
    case 'sqlite': {
      const dir = join(tmpdir(), `duetime-bench-${namespace}`);
      const filename = join(dir, 'bench.db');
      mkdirSync(dir, { recursive: true });
      const { createSqliteBackend } = await import('@duetime/backend-sqlite');
      const backend = await createSqliteBackend(
        { filename },
        options.synchronous ? { synchronous: options.synchronous } : {},
      );
      return {
        backend,
        namespace,
        storageBytes: () =>
          backend.store.transact((tx) => {
            // Pages in use as this connection sees them (WAL included, each page once).
            const pragma = (name: string) => Number(tx.sql.pragma(name, { simple: true }));
            return (pragma('page_count') - pragma('freelist_count')) * pragma('page_size');
          }),
        drop: async () => rmSync(dir, { recursive: true, force: true }),
      };
    }
    case 'postgres': {
      const { createPostgresBackend } = await import('@duetime/backend-postgres');
      const backend = await createPostgresBackend(
        { connectionString: PG_URL },
        {
          schema: namespace,
          ...(options.applicationName ? { applicationName: options.applicationName } : {}),
        },
      );
      return {
        backend,
        namespace,
        storageBytes: () => pgSchemaBytes(PG_URL, namespace),
        async drop() {
          const { Client } = await import('pg');
          const client = new Client({ connectionString: PG_URL });
          await client.connect();
          await client.query(`DROP SCHEMA IF EXISTS "${namespace}" CASCADE`);
          await client.end();
        },
      };
    }
    case 'redis': {
      const { createRedisBackend } = await import('@duetime/backend-redis');
      const backend = await createRedisBackend({ url: REDIS_URL }, { prefix: namespace });
      return {
        backend,
        namespace,
        storageBytes: () => redisKeyBytes(REDIS_URL, `{${namespace}}:*`),
        async drop() {
          const { Redis } = await import('ioredis');
          const redis = new Redis(REDIS_URL);
          let cursor = '0';
          do {
            const [next, keys] = await redis.scan(cursor, 'MATCH', `{${namespace}}:*`, 'COUNT', 1000);
            cursor = next;
            if (keys.length > 0) await redis.unlink(...keys);
          } while (cursor !== '0');
          redis.disconnect();
        },
      };
    }
    case 'nats': {
      const { connectNats, createNatsBackend, deleteNatsBackendData } = await import('@duetime/backend-nats');
      const backend = await createNatsBackend({ servers: NATS_URL }, { prefix: namespace });
      const { log, state, lease } = backend.streams;
      return {
        backend,
        namespace,
        storageBytes: () => natsStreamBytes(NATS_URL, [log, state, lease]),
        async drop() {
          const nc = await connectNats(NATS_URL);
          try {
            await deleteNatsBackendData(nc, namespace);
          } finally {
            await nc.close();
          }
        },
      };
    }
  }
}

/**
 * duetime on one backend: one schedule per transaction, batches of up to 100 per transaction, a Dispatcher
 * as worker, every setting at its default.
 */
export function duetime(kind: DuetimeBackendName, variant: OpenOptions = {}): Subject {
  const synchronous = variant.synchronous;
  return {
    name: synchronous ? `duetime/${kind}-sync-${synchronous}` : `duetime/${kind}`,
    library: 'duetime',
    backend: kind,
    tuning: `defaults (Dispatcher rescanInterval 1 s, push wake-ups${synchronous ? `; SQLite synchronous '${synchronous}'` : ''}); a batch is one transaction per 100 schedules`,
    async create(options: CreateOptions = {}): Promise<Queue> {
      const opened = await openDuetime(kind, undefined, { ...variant, ...options });
      const { store } = opened.backend;
      const stops: (() => Promise<void>)[] = [];
      return {
        async enqueue(item) {
          await store.transact((tx) =>
            tx.schedule(`bench/${item.id}`, new Date(item.dueAt), {
              type: 'bench',
              aggregateId: item.id,
              data: payload(item),
            }),
          );
        },
        async enqueueBatch(items) {
          for (let i = 0; i < items.length; i += 100) {
            const chunk = items.slice(i, i + 100);
            await store.transact(async (tx) => {
              for (const item of chunk) {
                await tx.schedule(`bench/${item.id}`, new Date(item.dueAt), {
                  type: 'bench',
                  aggregateId: item.id,
                  data: payload(item),
                });
              }
            });
          }
        },
        async startWorker({ concurrency, onJob }) {
          const dispatcher = new Dispatcher({
            store,
            concurrency,
            processor: async (_tx, message) => {
              onJob((message.data as { dueAt: number }).dueAt);
            },
          });
          const controller = new AbortController();
          const done = dispatcher.run(controller.signal);
          const stop = async () => {
            controller.abort();
            await done;
          };
          stops.push(stop);
          return stop;
        },
        storageBytes: () => opened.storageBytes(),
        async close() {
          await Promise.all(stops.map((s) => s()));
          await opened.backend.close();
          await opened.drop();
        },
      };
    },
  };
}
