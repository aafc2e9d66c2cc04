import { randomBytes } from 'node:crypto';
import {
  type Backend,
  type Clock,
  createStore,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  positiveInteger,
  type Store,
  silentLogger,
  systemClock,
} from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  checkConnection,
  connectNats,
  logConnectionStatus,
  type NatsServers,
  parseServers,
  serverVersion,
} from './connection.js';
import { NatsCursors } from './cursors.js';
import { ensureAnchor, NatsIo } from './io.js';
import { type Layout, layout as makeLayout } from './layout.js';
import { NatsLeases } from './leases.js';
import { CommitLog } from './log.js';
import { ServerClock } from './server-clock.js';
import { Materialiser, type MaterialiserHooks } from './state/materialiser.js';
import { NodeCache } from './state/snapshot.js';
import { NatsStoreDriver, type StoreHooks } from './store.js';

/** Where the backend's data lives: a URL (or several) it connects to, or the application's connection. */
export type NatsTarget = { servers: NatsServers } | { connection: NatsConnection };

export interface NatsBackendOptions {
  /**
   * Names this backend's streams (`<prefix>_log`, `<prefix>_state`, `<prefix>_lease`) and subjects
   * (`<prefix>.>`). Processes sharing data use the same prefix. 1 to 32 letters, digits, `_` or `-`.
   * Default `duetime`.
   */
  prefix?: string;
  /** Stamps events and runs dispatchers (default: the system clock). Leases use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** First connection, when connecting from `servers` (default 5000 ms). */
  connectTimeoutMs?: number;
  /** Each JetStream request (default 5000 ms). */
  requestTimeoutMs?: number;
  /**
   * How long a commit keeps retrying through a lost connection before it reports a transient error with
   * an unknown outcome (default 30000 ms).
   */
  commitTimeoutMs?: number;
  /**
   * How long a plan another process opened may make no progress before this process finishes it
   * (default 1500 ms). Shorter recovers faster from a crashed process, longer avoids duplicate work.
   */
  stallMs?: number;
  /** Stream storage (default `file`). `memory` does not survive a server restart. */
  storage?: 'file' | 'memory';
  /** Stream replicas in a cluster (default 1). */
  replicas?: number;
  /**
   * Bytes of index nodes cached per backend (default 32 MiB). Node versions never change, so the cache
   * never goes stale; it only saves reads.
   */
  nodeCacheBytes?: number;
  /**
   * Hooks that stop a process at chosen points, for crash tests.
   * @internal
   */
  testing?: { hooks?: MaterialiserHooks & StoreHooks };
}

/** A duetime backend on NATS JetStream. */
export interface NatsBackend extends Backend<undefined> {
  readonly name: 'nats';
  /** The server this backend talks to, and its version (as reported when the backend opened). */
  readonly server: { url: string; version: string };
  /** The streams holding this backend's data. */
  readonly streams: { log: string; state: string; lease: string };
}

const DUPLICATE_WINDOW_MS = 120_000;

/** An optional whole number of milliseconds that goes to a timer: positive, at most {@link MAX_TIMER_MS}. */
function optionalPositive(field: string, value: unknown, fallback: number): number {
  return value === undefined
    ? fallback
    : duration(field, positiveInteger(field, value), { max: MAX_TIMER_MS });
}

/**
 * Opens the NATS backend: transactional schedules (a commit log applied to materialised state),
 * leases and cursors, all on JetStream. Creates its streams when missing.
 *
 * @example
 * const backend = await createNatsBackend({ servers: 'nats://127.0.0.1:4222' }, { prefix: 'shop' });
 * await backend.store.transact((tx) => tx.schedule('order/1/expire', new Date(Date.now() + 60_000), msg));
 */
export async function createNatsBackend(
  target: NatsTarget,
  options: NatsBackendOptions = {},
): Promise<NatsBackend> {
  if (typeof target !== 'object' || target === null)
    throw new InvalidArgumentError('target', target, 'must be { servers } or { connection }');
  const hasServers = 'servers' in target && target.servers !== undefined;
  const hasConnection = 'connection' in target && target.connection !== undefined;
  if (hasServers === hasConnection)
    throw new InvalidArgumentError('target', target, 'give exactly one of { servers } or { connection }');
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new InvalidArgumentError('options', options, 'must be an object of options');
  const layout = makeLayout(options.prefix ?? 'duetime');
  const requestTimeoutMs = optionalPositive('options.requestTimeoutMs', options.requestTimeoutMs, 5000);
  const commitTimeoutMs = optionalPositive('options.commitTimeoutMs', options.commitTimeoutMs, 30_000);
  const stallMs = optionalPositive('options.stallMs', options.stallMs, 1500);
  const replicas = optionalPositive('options.replicas', options.replicas, 1);
  const nodeCacheBytes = optionalPositive('options.nodeCacheBytes', options.nodeCacheBytes, 32 * 1024 * 1024);
  const storage = options.storage ?? 'file';
  if (storage !== 'file' && storage !== 'memory')
    throw new InvalidArgumentError('options.storage', storage, 'must be "file" or "memory"');
  const logger = options.logger ?? silentLogger;
  const clock = options.clock ?? systemClock;

  let nc: NatsConnection;
  let owned: boolean;
  if (hasServers) {
    const servers = (target as { servers: NatsServers }).servers;
    parseServers(servers);
    nc = await connectNats(servers, {
      ...(options.connectTimeoutMs !== undefined ? { connectTimeoutMs: options.connectTimeoutMs } : {}),
      name: `duetime ${layout.prefix}`,
    });
    owned = true;
  } else {
    nc = checkConnection((target as { connection: unknown }).connection);
    owned = false;
  }
  try {
    return await open(nc, owned, layout, {
      requestTimeoutMs,
      commitTimeoutMs,
      stallMs,
      replicas,
      nodeCacheBytes,
      storage,
      logger,
      clock,
      ...(options.testing?.hooks ? { hooks: options.testing.hooks } : {}),
    });
  } catch (error) {
    if (owned) await nc.close().catch(() => {});
    throw error;
  }
}

interface Settings {
  requestTimeoutMs: number;
  commitTimeoutMs: number;
  stallMs: number;
  replicas: number;
  nodeCacheBytes: number;
  storage: 'file' | 'memory';
  logger: Logger;
  clock: Clock;
  hooks?: MaterialiserHooks & StoreHooks;
}

async function open(nc: NatsConnection, owned: boolean, layout: Layout, s: Settings): Promise<NatsBackend> {
  const version = serverVersion(nc).text;
  const io = await NatsIo.open(nc, s.requestTimeoutMs);
  const common = { storage: s.storage, replicas: s.replicas, duplicateWindowMs: DUPLICATE_WINDOW_MS };
  await io.ensureStream({
    name: layout.logStream,
    subjects: [`${layout.prefix}.log.>`],
    maxPerSubject: -1,
    ...common,
  });
  await io.ensureStream({
    name: layout.stateStream,
    subjects: [layout.stateSubjects],
    maxPerSubject: 2,
    ...common,
  });
  await io.ensureStream({
    name: layout.leaseStream,
    subjects: [`${layout.prefix}.lease.>`],
    maxPerSubject: 1,
    ...common,
  });

  const cache = new NodeCache(s.nodeCacheBytes);
  const materialiser = new Materialiser(io, layout, cache, {
    stallMs: s.stallMs,
    logger: s.logger,
    ...(s.hooks ? { hooks: s.hooks } : {}),
  });
  await materialiser.genesis();
  await ensureAnchor(io, layout.logAnchor);
  await ensureAnchor(io, layout.leaseAnchor);
  materialiser.start();
  const serverClock = new ServerClock(io, layout);
  const driver = new NatsStoreDriver({
    io,
    layout,
    log: new CommitLog(io, layout, { commitTimeoutMs: s.commitTimeoutMs }),
    materialiser,
    cache,
    logger: s.logger,
    origin: randomBytes(8).toString('hex'),
    commitTimeoutMs: s.commitTimeoutMs,
    serverClock,
    ...(s.hooks ? { hooks: s.hooks } : {}),
  });
  const store: Store<undefined> = createStore(driver, { clock: s.clock, logger: s.logger });
  const stopStatus = logConnectionStatus(nc, s.logger, `nats backend ${layout.prefix}`);
  let closing: Promise<void> | undefined;
  return {
    name: 'nats',
    store,
    leases: new NatsLeases(io, layout, serverClock),
    cursors: new NatsCursors(io, layout, serverClock),
    capabilities: { multiProcess: true, durable: true, sql: false, exclusiveClaims: false },
    server: { url: nc.getServer(), version },
    streams: { log: layout.logStream, state: layout.stateStream, lease: layout.leaseStream },
    close() {
      closing ??= (async () => {
        await store.close();
        stopStatus();
        io.close();
        if (owned) await nc.close();
      })();
      return closing;
    },
  };
}

/**
 * Deletes the streams of the backend with `prefix` on the server (all its schedules, events, leases and
 * cursors). For tests and tooling; close every backend using the prefix first.
 */
export async function deleteNatsBackendData(connection: NatsConnection, prefix: string): Promise<void> {
  const layout = makeLayout(prefix);
  const io = await NatsIo.open(connection, 5000);
  for (const stream of [layout.logStream, layout.stateStream, layout.leaseStream]) {
    try {
      await io.jsm.streams.delete(stream);
    } catch (error) {
      if (!(error instanceof Error) || !/not found/i.test(error.message))
        throw io.error(error, `delete stream ${stream}`);
    }
  }
}
