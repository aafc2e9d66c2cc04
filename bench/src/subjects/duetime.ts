import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, Dispatcher, parseCron, recurring } from '@duetime/core';
import { natsStreamBytes, pgSchemaBytes, redisKeyBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  NATS_NEW_URL,
  PADDING,
  PG_URL,
  payload,
  type Queue,
  REDIS_URL,
  type RecurringQueue,
  type RecurringSubject,
  type Subject,
  uniqueName,
} from './types.js';

export type DuetimeBackendName = 'sqlite' | 'postgres' | 'redis' | 'nats';

export const DUETIME_BACKENDS: DuetimeBackendName[] = ['sqlite', 'postgres', 'redis', 'nats'];

/**
 * The servers the scaleout workload spreads dispatcher processes over: single servers and the clusters of
 * `bash scripts/services.sh up --clusters` (subjects `duetime/<target>`).
 */
export type ScaleoutTarget = 'postgres' | 'redis' | 'redis-cluster' | 'nats' | 'nats-cluster';

export const SCALEOUT_TARGETS: ScaleoutTarget[] = [
  'postgres',
  'redis',
  'redis-cluster',
  'nats',
  'nats-cluster',
];

export interface OpenOptions extends CreateOptions {
  /** SQLite only: `synchronous` (the backend's default is `full`). */
  synchronous?: 'full' | 'normal';
}

/**
 * How the worker's Dispatcher reports, for the telemetry workload: `off` (`telemetry: false`: no spans, no
 * metrics, which is what an application without `@opentelemetry/api` gets), `noop` (the API with no SDK
 * registered: every span goes to the API's no-op tracer), `events` (telemetry off, a listener on every
 * dispatcher event). Left out: the default (the API loaded lazily when installed, its global providers).
 */
export type TelemetryVariant = 'off' | 'noop' | 'events';

export interface DuetimeVariant extends OpenOptions {
  telemetry?: TelemetryVariant;
}

const TELEMETRY_NAMES: Record<TelemetryVariant, string> = {
  off: 'telemetry-off',
  noop: 'otel-noop',
  events: 'events',
};

const TELEMETRY_TUNING: Record<TelemetryVariant, string> = {
  off: "`telemetry: false` (as without '@opentelemetry/api')",
  noop: "`telemetry: { api }` with '@opentelemetry/api' and no SDK: a span per delivery on the no-op tracer, no-op metrics",
  events: '`telemetry: false` and a listener on every dispatcher event',
};

/** The Dispatcher options of a telemetry variant. */
async function telemetryOptions(variant: TelemetryVariant | undefined): Promise<Record<string, unknown>> {
  if (variant === undefined) return {};
  if (variant === 'noop') return { telemetry: { api: await import('@opentelemetry/api') } };
  return { telemetry: false };
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
      const backend = await createNatsBackend({ servers: NATS_NEW_URL }, { prefix: namespace });
      // Every stream the backend names (whatever its layout calls them).
      const streams = Object.values(backend.streams);
      return {
        backend,
        namespace,
        storageBytes: () => natsStreamBytes(NATS_NEW_URL, streams),
        async drop() {
          const nc = await connectNats(NATS_NEW_URL);
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
 * duetime on one backend, every setting at its default: one schedule per transaction, batches of up to 100
 * per transaction, a Dispatcher as worker. Its delivery batches are the defaults too: up to 256 due
 * schedules claimed and committed together, a batch aiming to run 50 ms (`batchSize`, `batchDuration`),
 * `concurrency` batches open at once, each running its processors one after another in savepoints.
 */
export function duetime(kind: DuetimeBackendName, variant: DuetimeVariant = {}): Subject {
  const { synchronous, telemetry, ...open } = variant;
  const suffix = [
    ...(synchronous ? [`sync-${synchronous}`] : []),
    ...(telemetry ? [TELEMETRY_NAMES[telemetry]] : []),
  ].join('-');
  return {
    name: suffix ? `duetime/${kind}-${suffix}` : `duetime/${kind}`,
    library: 'duetime',
    backend: kind,
    tuning: `defaults (Dispatcher: delivery batches of up to 256 committed together, batchDuration 50 ms, concurrency = batches open at once, rescanInterval 1 s, push wake-ups${synchronous ? `; SQLite synchronous '${synchronous}'` : ''}${telemetry ? `; ${TELEMETRY_TUNING[telemetry]}` : ''}); enqueue batches are one transaction per 100 schedules`,
    async create(options: CreateOptions = {}): Promise<Queue> {
      const opened = await openDuetime(kind, options.name, {
        ...open,
        ...(synchronous ? { synchronous } : {}),
        ...options,
      });
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
            ...(await telemetryOptions(telemetry)),
            processor: async (_tx, message) => {
              onJob((message.data as { dueAt: number }).dueAt);
            },
          });
          if (telemetry === 'events') {
            let heard = 0;
            const count = () => void heard++;
            for (const name of [
              'delivered',
              'failed',
              'retried',
              'deadLettered',
              'skipped',
              'missed',
            ] as const)
              dispatcher.on(name, count);
          }
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
          if (!options.keep) await opened.drop();
        },
      };
    },
  };
}

/**
 * duetime's recurring schedules on one backend, at the defaults: `tx.schedule(key, recurring(parseCron(expr,
 * zone)), message)`, 100 schedules per transaction, a Dispatcher (default delivery batches) as worker. Each
 * occurrence's consumption and the next occurrence's arming commit with the processor's writes; missed
 * occurrences follow `catchUp: 'latest'` (the default: of those more than 60 s late, only the latest runs).
 */
export function duetimeRecurring(kind: DuetimeBackendName): RecurringSubject {
  return {
    name: `duetime/${kind}`,
    library: 'duetime',
    backend: kind,
    tuning:
      "defaults: recurring(parseCron(expr, zone)) with catchUp 'latest' and grace 60 s, 100 schedules per transaction; Dispatcher with its default delivery batches, concurrency as given",
    async create(): Promise<RecurringQueue> {
      const opened = await openDuetime(kind);
      const { store } = opened.backend;
      const stops: (() => Promise<void>)[] = [];
      return {
        async schedule(items) {
          for (let i = 0; i < items.length; i += 100) {
            const chunk = items.slice(i, i + 100);
            await store.transact(async (tx) => {
              for (const item of chunk)
                await tx.schedule(`recurring/${item.key}`, recurring(parseCron(item.cron, item.zone)), {
                  type: 'bench',
                  aggregateId: item.key,
                  data: { key: item.key, pad: PADDING },
                });
            });
          }
        },
        async startWorker({ concurrency, onOccurrence }) {
          const dispatcher = new Dispatcher({
            store,
            concurrency,
            processor: async (_tx, message, context) => {
              onOccurrence((message.data as { key: string }).key, context.occurrence?.at.getTime());
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
          await opened.backend.close();
          await opened.drop();
        },
      };
    },
  };
}
