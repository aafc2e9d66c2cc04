import { createConnection } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import type { Backend, Clock, Logger } from '@duetime/core';

/** The backends the suite runs on. */
export type BackendName = 'sqlite' | 'postgres' | 'redis' | 'nats';

export const BACKENDS: readonly BackendName[] = ['sqlite', 'postgres', 'redis', 'nats'];

/**
 * How to open one isolated data set on one backend, as plain JSON so that child processes open the same
 * data: a file, a schema, a key prefix or a stream prefix per namespace. `url` may point at a
 * fault-injecting proxy instead of the server itself.
 */
export type TargetSpec =
  | { kind: 'sqlite'; file: string; busyTimeoutMs?: number; synchronous?: 'full' | 'normal' }
  | {
      kind: 'postgres';
      url: string;
      schema: string;
      applicationName: string;
      poolSize?: number;
      idleInTransactionTimeoutMs?: number;
    }
  | {
      kind: 'redis';
      url: string;
      prefix: string;
      commitTimeoutMs?: number;
      /** Every node of a Redis Cluster: the backend then talks through an ioredis `Cluster` seeded with them. */
      cluster?: string[];
      waitForReplicas?: { replicas: number; timeoutMs?: number };
    }
  | {
      kind: 'nats';
      url: string;
      prefix: string;
      /** Every server of a NATS cluster: the backend then connects to all of them (`url` is one of them). */
      cluster?: string[];
      /** Stream replicas (R3 on a three-server cluster). */
      replicas?: number;
    };

export interface OpenOptions {
  clock?: Clock;
  logger?: Logger;
}

/** The service URL a backend's tests use (the variables of docs/contributing.md). */
export function serviceUrl(kind: Exclude<BackendName, 'sqlite'>): string {
  switch (kind) {
    case 'postgres':
      return process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';
    case 'redis':
      return process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
    case 'nats':
      // The NATS store needs NATS >= 2.12 (atomic batch publish): the newer server of the services script.
      return process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';
  }
}

const SERVICE_NAMES = { postgres: 'PostgreSQL', redis: 'Redis', nats: 'NATS with JetStream' } as const;
const SERVICE_VARIABLES = {
  postgres: 'DUETIME_PG_URL',
  redis: 'DUETIME_REDIS_URL',
  nats: 'DUETIME_NATS_NEW_URL',
};

/** The host and port a service URL names. */
export function hostAndPort(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  const defaults: Record<string, number> = {
    'postgres:': 5432,
    'postgresql:': 5432,
    'redis:': 6379,
    'nats:': 4222,
  };
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: parsed.port ? Number(parsed.port) : (defaults[parsed.protocol] ?? 0),
  };
}

/** A copy of `url` with another host and port (a proxy in front of the same server). */
export function urlVia(url: string, host: string, port: number): string {
  const parsed = new URL(url);
  parsed.hostname = host;
  parsed.port = String(port);
  return parsed.toString();
}

/**
 * Fails at once, naming the service, the URL and how to start it, when the backend's server does not
 * accept connections. Never skips.
 */
export async function assertServiceUp(kind: BackendName): Promise<void> {
  if (kind === 'sqlite') return;
  const url = serviceUrl(kind);
  const { host, port } = hostAndPort(url);
  const reachable = await new Promise<string | undefined>((resolve) => {
    const socket = createConnection({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('no answer within 5 s');
    }, 5000);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(undefined);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      resolve(error.message);
    });
  });
  if (reachable !== undefined)
    throw new Error(
      `${SERVICE_NAMES[kind]} is not reachable at ${url} (${reachable}); start it with \`bash scripts/services.sh up\` or set ${SERVICE_VARIABLES[kind]}`,
    );
}

/** A target for a fresh namespace on `kind`, on its usual server (or on `url`). */
export function newTarget(kind: BackendName, namespace: string, url?: string): TargetSpec {
  switch (kind) {
    case 'sqlite':
      return { kind, file: join(sqliteDirectory(), `${namespace}.db`) };
    case 'postgres':
      return {
        kind,
        url: url ?? serviceUrl(kind),
        schema: `rel_${namespace}`,
        applicationName: `duetime-rel-${namespace}`,
        poolSize: 4,
      };
    case 'redis':
      return { kind, url: url ?? serviceUrl(kind), prefix: `rel${namespace}` };
    case 'nats':
      return { kind, url: url ?? serviceUrl(kind), prefix: `rel${namespace}` };
  }
}

let sqliteDir: string | undefined;
function sqliteDirectory(): string {
  sqliteDir ??= process.env.DUETIME_RELIABILITY_DIR ?? tmpdir();
  return sqliteDir;
}

/** Whether the backend gives the application SQL inside transactions (`tx.sql`). */
export function hasSql(spec: TargetSpec): boolean {
  return spec.kind === 'sqlite' || spec.kind === 'postgres';
}

/** Opens the backend a target names. Each backend package is loaded only when used. */
export async function openTarget(spec: TargetSpec, options: OpenOptions = {}): Promise<Backend> {
  const common = {
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  };
  switch (spec.kind) {
    case 'sqlite': {
      const { createSqliteBackend } = await import('@duetime/backend-sqlite');
      return createSqliteBackend(
        { filename: spec.file },
        {
          ...common,
          ...(spec.busyTimeoutMs !== undefined ? { busyTimeoutMs: spec.busyTimeoutMs } : {}),
          ...(spec.synchronous !== undefined ? { synchronous: spec.synchronous } : {}),
        },
      );
    }
    case 'postgres': {
      const { createPostgresBackend } = await import('@duetime/backend-postgres');
      return createPostgresBackend(
        { connectionString: spec.url },
        {
          ...common,
          schema: spec.schema,
          applicationName: spec.applicationName,
          poolSize: spec.poolSize ?? 4,
          connectTimeoutMs: 5000,
          ...(spec.idleInTransactionTimeoutMs !== undefined
            ? { idleInTransactionTimeoutMs: spec.idleInTransactionTimeoutMs }
            : {}),
        },
      );
    }
    case 'redis': {
      const { createRedisBackend } = await import('@duetime/backend-redis');
      const options = {
        ...common,
        prefix: spec.prefix,
        connectTimeoutMs: 3000,
        requestTimeoutMs: 5000,
        ...(spec.commitTimeoutMs !== undefined ? { commitTimeoutMs: spec.commitTimeoutMs } : {}),
        ...(spec.waitForReplicas ? { waitForReplicas: spec.waitForReplicas } : {}),
      };
      if (!spec.cluster) return createRedisBackend({ url: spec.url }, options);
      const { openRedisCluster } = await import('./redis-target.js');
      return openRedisCluster(spec.cluster, options);
    }
    case 'nats': {
      const { openNats } = await import('./nats-target.js');
      return openNats(spec.cluster ?? spec.url, spec.prefix, {
        ...common,
        ...(spec.replicas !== undefined ? { replicas: spec.replicas } : {}),
        // A killed worker's claims lapse after this; on a cluster it outlasts a leader election (5-9 s).
        claims: { ttlMs: (spec.replicas ?? 1) > 1 ? 15_000 : 5_000 },
      });
    }
  }
}

/** Removes the data of a target (a file, a schema, keys or streams). Best effort. */
export async function dropTarget(spec: TargetSpec): Promise<void> {
  switch (spec.kind) {
    case 'sqlite': {
      const { rmSync } = await import('node:fs');
      for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${spec.file}${suffix}`, { force: true });
      return;
    }
    case 'postgres': {
      const { default: pg } = await import('pg');
      const client = new pg.Client({ connectionString: withUser(spec.url) });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS "${spec.schema}" CASCADE`);
      } finally {
        await client.end();
      }
      return;
    }
    case 'redis': {
      if (spec.cluster) {
        const { dropRedisClusterStore } = await import('./redis-target.js');
        return dropRedisClusterStore(spec.cluster, spec.prefix);
      }
      const { Redis } = await import('ioredis');
      const { KeySpace } = await import('@duetime/backend-redis');
      const admin = new Redis(spec.url, { maxRetriesPerRequest: 1 });
      try {
        const { pattern } = new KeySpace(spec.prefix);
        let cursor = '0';
        do {
          const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
          cursor = next;
          if (keys.length > 0) await admin.unlink(...keys);
        } while (cursor !== '0');
      } finally {
        admin.disconnect();
      }
      return;
    }
    case 'nats': {
      const { dropNats } = await import('./nats-target.js');
      await dropNats(spec.cluster ?? spec.url, spec.prefix);
      return;
    }
  }
}

/** A PostgreSQL URL with the operating-system user filled in when it names none (as libpq does). */
export function withUser(url: string): string {
  const parsed = new URL(url);
  if (parsed.username) return url;
  parsed.username = userInfo().username;
  return parsed.toString();
}
