import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, Dispatcher } from '@duetime/core';
import { NATS_URL, PG_URL, payload, type Queue, REDIS_URL, type Subject, uniqueName } from './types.js';

export type DuetimeBackendName = 'sqlite' | 'postgres' | 'redis' | 'nats';

/** Opens a duetime backend on fresh, isolated data; `drop` removes that data afterwards. */
export async function openDuetime(
  kind: DuetimeBackendName,
  namespace: string = uniqueName('bench'),
): Promise<{ backend: Backend; namespace: string; drop(): Promise<void> }> {
  switch (kind) {
    case 'sqlite': {
      const dir = join(tmpdir(), `duetime-bench-${namespace}`);
      mkdirSync(dir, { recursive: true });
      const { createSqliteBackend } = await import('@duetime/backend-sqlite');
      const backend = await createSqliteBackend({ filename: join(dir, 'bench.db') });
      return { backend, namespace, drop: async () => rmSync(dir, { recursive: true, force: true }) };
    }
    case 'postgres': {
      const { createPostgresBackend } = await import('@duetime/backend-postgres');
      const backend = await createPostgresBackend({ connectionString: PG_URL }, { schema: namespace });
      return {
        backend,
        namespace,
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
        async drop() {
          const { Redis } = await import('ioredis');
          const redis = new Redis(REDIS_URL);
          let cursor = '0';
          do {
            const [next, keys] = await redis.scan(cursor, 'MATCH', `*${namespace}*`, 'COUNT', 1000);
            cursor = next;
            if (keys.length > 0) await redis.unlink(...keys);
          } while (cursor !== '0');
          redis.disconnect();
        },
      };
    }
    case 'nats': {
      const { createNatsBackend } = await import('@duetime/backend-nats');
      const backend = await createNatsBackend({ servers: NATS_URL }, { prefix: namespace });
      const drop = (backend as unknown as { destroy?: () => Promise<void> }).destroy;
      return { backend, namespace, drop: async () => drop?.call(backend) };
    }
  }
}

/** duetime on one backend: one schedule per transaction, batches of up to 100 per transaction, a Dispatcher as worker. */
export function duetime(kind: DuetimeBackendName): Subject {
  return {
    name: `duetime/${kind}`,
    library: 'duetime',
    backend: kind,
    tuning: 'defaults (rescanInterval 1 s, push wake-ups); batch = one transaction per 100 schedules',
    async create(): Promise<Queue> {
      const { backend, drop } = await openDuetime(kind);
      const { store } = backend;
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
        async close() {
          await Promise.all(stops.map((s) => s()));
          await backend.close();
          await drop();
        },
      };
    },
  };
}
