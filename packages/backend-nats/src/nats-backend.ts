import {
  type Backend,
  type Clock,
  defineBackend,
  InvalidArgumentError,
  type Logger,
  NotSupportedError,
} from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  checkConnection,
  connectNats,
  describeTargets,
  logConnectionStatus,
  type NatsServers,
  parseServers,
  serverVersion,
} from './connection.js';
import { NatsCursors } from './cursors.js';
import { isStreamNotFound } from './errors.js';
import { NatsIo } from './io.js';
import { layout as makeLayout } from './layout.js';
import { NatsLeases } from './leases.js';
import { type MigrationOptions, type MigrationReport, migrateLegacyNatsStore } from './migrate.js';
import { type NatsBackendOptions, readPlainOptions, readSettings, type Settings } from './options.js';
import { ServerClock } from './server-clock.js';
import {
  addCommitMarkers,
  ensureLeaseStream,
  ensureStore,
  readMeta,
  refuseLegacyStore,
  requireStoreServer,
  requireStream,
} from './setup.js';
import { NatsStoreAdapter, type NatsUnit } from './store/adapter.js';

export type { NatsBackendOptions } from './options.js';
export { LegacyStoreError, STORE_MIN_SERVER } from './setup.js';

/** Where the backend's data lives: a URL (or several) it connects to, or the application's connection. */
export type NatsTarget = { servers: NatsServers } | { connection: NatsConnection };

/** A duetime backend on NATS JetStream. */
export interface NatsBackend extends Backend<undefined> {
  readonly name: 'nats';
  /** The server this backend talks to, and its version (as reported when the backend opened). */
  readonly server: { url: string; version: string };
  /** The streams holding this backend's data. */
  readonly streams: { store: string; lease: string };
}

/** Leases and calendar cursors on NATS, without the store: works on any JetStream server (2.9 and later). */
export interface NatsCoordination {
  readonly leases: Backend['leases'];
  readonly cursors: Backend['cursors'];
  readonly server: { url: string; version: string };
  readonly streams: { lease: string };
  close(): Promise<void>;
}

/**
 * Checks the target and connects (or takes the application's connection, which is never closed here).
 * `connect` bounds the first connection by the connect timeout.
 */
async function connectTarget(
  target: NatsTarget,
  name: string,
  connectTimeoutMs: number,
  connect: (what: string, attempt: () => Promise<NatsConnection>) => Promise<NatsConnection>,
): Promise<{ nc: NatsConnection; owned: boolean }> {
  if (typeof target !== 'object' || target === null)
    throw new InvalidArgumentError('target', target, 'must be { servers } or { connection }');
  const hasServers = 'servers' in target && target.servers !== undefined;
  const hasConnection = 'connection' in target && target.connection !== undefined;
  if (hasServers === hasConnection)
    throw new InvalidArgumentError('target', target, 'give exactly one of { servers } or { connection }');
  if (!hasServers)
    return { nc: checkConnection((target as { connection: unknown }).connection), owned: false };
  const servers = (target as { servers: NatsServers }).servers;
  const targets = parseServers(servers);
  const nc = await connect(describeTargets(targets), () => connectNats(servers, { connectTimeoutMs, name }));
  return { nc, owned: true };
}

/** Connects outside a backend (coordination, migration), within `connectTimeoutMs`. */
async function connectPlain(target: NatsTarget, settings: Settings, connectTimeoutMs: number) {
  return connectTarget(target, `duetime ${settings.prefix}`, connectTimeoutMs, (_what, attempt) => attempt());
}

/**
 * Opens the NATS backend: the transactional store (schedules, events and dead letters, each write a
 * JetStream primitive), leases and cursors. Creates its streams when missing. The store needs NATS 2.12
 * or later (atomic batch publish); on an older server this fails with a {@link NotSupportedError} naming
 * the version, and {@link createNatsCoordination} gives leases and cursors there.
 *
 * @example
 * const backend = await createNatsBackend({ servers: 'nats://127.0.0.1:4222' }, { prefix: 'shop' });
 * await backend.store.transact((tx) => tx.schedule('order/1/expire', new Date(Date.now() + 60_000), msg));
 */
export const createNatsBackend = defineBackend<
  NatsTarget,
  NatsBackendOptions,
  Settings,
  undefined,
  NatsUnit,
  { server: { url: string; version: string }; streams: { store: string; lease: string } }
>({
  name: 'nats',
  factory: 'createNatsBackend',
  connectTimeoutMs: 5000,
  options: readSettings,
  async open(target, ctx) {
    const s = ctx.options;
    const layout = makeLayout(s.prefix);
    for (const name of s.deprecated)
      ctx.logger.warn(
        `nats backend: options.${name} is deprecated and ignored (the store no longer needs it)`,
      );
    const { nc, owned } = await connectTarget(
      target,
      `duetime ${layout.prefix}`,
      ctx.connectTimeoutMs,
      ctx.connect,
    );
    if (owned) ctx.onClose(() => nc.close());
    const version = serverVersion(nc);
    requireStoreServer(version, nc.getServer());
    const io = await NatsIo.open(nc, s.requestTimeoutMs, s.commitTimeoutMs);
    ctx.onClose(() => io.close());
    await refuseLegacyStore(io, layout, ctx.logger);
    let meta: Awaited<ReturnType<typeof readMeta>>;
    if (s.migrate) meta = await ensureStore(io, layout, s, 0, s.claims.ttlMs);
    else {
      await requireStream(io, layout.storeStream, layout);
      meta = await readMeta(io, layout);
      if (meta.version === 1)
        throw new NotSupportedError(
          `stream ${layout.storeStream} holds a store of format 1 (a due index of its own); open it once with migrate: true to move it to format 2 (JetStream timers) in place, after stopping every process of the earlier version`,
        );
      await addCommitMarkers(io, layout, false);
    }
    await ensureLeaseStream(io, layout, s);
    const serverClock = new ServerClock(io, layout);
    const store = new NatsStoreAdapter({
      io,
      layout,
      versionBase: meta.versionBase,
      atomicBatchLimit: s.atomicBatchLimit,
      claimTtlMs: s.claims.ttlMs,
      fireAheadMs: s.fireAheadMs,
      logger: ctx.logger,
      serverLatest: () => serverClock.latest(),
    });
    ctx.onClose(logConnectionStatus(nc, ctx.logger, `nats backend ${layout.prefix}`));
    ctx.onClose(() => store.close());
    return {
      store,
      leases: new NatsLeases(io, layout, serverClock),
      cursors: new NatsCursors(io, layout, serverClock),
      capabilities: {
        multiProcess: true,
        durable: true,
        sql: false,
        exclusiveClaims: true,
      },
      describe: `nats backend ${layout.prefix} on ${nc.getServer()}`,
      extra: {
        server: { url: nc.getServer(), version: version.text },
        streams: { store: layout.storeStream, lease: layout.leaseStream },
      },
    };
  },
}) as (target: NatsTarget, options?: NatsBackendOptions) => Promise<NatsBackend>;

/**
 * Opens leases and calendar cursors on NATS without the store, for a calendar `Scheduler`
 * (`new Scheduler({ backend: coordination, ... })`) on any JetStream server, 2.9 included.
 */
export async function createNatsCoordination(
  target: NatsTarget,
  options: Omit<NatsBackendOptions, 'commitTimeoutMs'> = {},
): Promise<NatsCoordination> {
  const { settings, connectTimeoutMs, logger } = readPlainOptions(options, 'createNatsCoordination');
  const { nc, owned } = await connectPlain(target, settings, connectTimeoutMs);
  try {
    const io = await NatsIo.open(nc, settings.requestTimeoutMs);
    const layout = makeLayout(settings.prefix);
    await ensureLeaseStream(io, layout, settings);
    const serverClock = new ServerClock(io, layout);
    const stopStatus = logConnectionStatus(nc, logger, `nats leases ${layout.prefix}`);
    let closing: Promise<void> | undefined;
    return {
      leases: new NatsLeases(io, layout, serverClock),
      cursors: new NatsCursors(io, layout, serverClock),
      server: { url: nc.getServer(), version: serverVersion(nc).text },
      streams: { lease: layout.leaseStream },
      close() {
        closing ??= (async () => {
          stopStatus();
          io.close();
          if (owned) await nc.close();
        })();
        return closing;
      },
    };
  } catch (error) {
    if (owned) await nc.close().catch(() => {});
    throw error;
  }
}

/**
 * Moves a store of the earlier NATS format (duetime 0.1) under `options.prefix` to the current one, on a
 * NATS 2.12 or later server: pending schedules (keeping their versions) and events. The old store must be
 * at rest (every old-version process stopped). The old streams are deleted afterwards unless `keepOld`.
 * `duetime migrate --backend 'nats://host:4222?prefix=…'` runs it.
 */
export async function migrateNatsStore(
  target: NatsTarget,
  options: Omit<MigrationOptions, 'prefix'> & { prefix?: string } & Pick<
      NatsBackendOptions,
      'connectTimeoutMs' | 'storage' | 'replicas'
    > & { clock?: Clock; logger?: Logger },
): Promise<MigrationReport> {
  const { dryRun, keepOld, ...rest } = options ?? {};
  const { settings, connectTimeoutMs, logger } = readPlainOptions(rest, 'migrateNatsStore');
  const { nc, owned } = await connectPlain(target, settings, connectTimeoutMs);
  try {
    return await migrateLegacyNatsStore(
      nc,
      {
        prefix: settings.prefix,
        logger,
        requestTimeoutMs: settings.requestTimeoutMs,
        ...(dryRun !== undefined ? { dryRun } : {}),
        ...(keepOld !== undefined ? { keepOld } : {}),
      },
      settings,
    );
  } finally {
    if (owned) await nc.close().catch(() => {});
  }
}

/**
 * Deletes the streams of the backend with `prefix` on the server (all its schedules, events, leases and
 * cursors). For tests and tooling; close every backend using the prefix first.
 */
export async function deleteNatsBackendData(connection: NatsConnection, prefix: string): Promise<void> {
  const layout = makeLayout(prefix);
  const io = await NatsIo.open(connection, 5000);
  for (const stream of [
    layout.storeStream,
    layout.leaseStream,
    layout.legacyStreams.log,
    layout.legacyStreams.state,
  ]) {
    try {
      await io.jsm.streams.delete(stream);
    } catch (error) {
      if (!isStreamNotFound(error) && !(error instanceof Error && /not found/i.test(error.message)))
        throw io.error(error, `delete stream ${stream}`);
    }
  }
}
