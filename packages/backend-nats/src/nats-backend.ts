import { randomBytes } from 'node:crypto';
import {
  type Backend,
  type Clock,
  CorruptDataError,
  createStore,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  NotFoundError,
  NotSupportedError,
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
  type ServerVersion,
  serverVersion,
  versionAtLeast,
} from './connection.js';
import { NatsCursors } from './cursors.js';
import { isStreamNotFound } from './errors.js';
import { ensureAnchor, NatsIo, whileStarting } from './io.js';
import { type Layout, layout as makeLayout } from './layout.js';
import { NatsLeases } from './leases.js';
import { type MigrationOptions, type MigrationReport, migrateLegacyNatsStore } from './migrate.js';
import { ServerClock } from './server-clock.js';
import type { ClaimSettings } from './store/claims.js';
import { NatsStoreDriver } from './store/driver.js';
import type { MetaValue } from './store/records.js';

/** Where the backend's data lives: a URL (or several) it connects to, or the application's connection. */
export type NatsTarget = { servers: NatsServers } | { connection: NatsConnection };

export interface NatsBackendOptions {
  /**
   * Names this backend's streams (`<prefix>_store`, `<prefix>_lease`) and subjects (`<prefix>.>`).
   * Processes sharing data use the same prefix. 1 to 32 letters, digits, `_` or `-`. Default `duetime`.
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
   * How long a commit keeps resending its batch through a lost connection before it reports a transient
   * error (default 30000 ms). Resending is safe: a batch the server stored is refused as a duplicate.
   */
  commitTimeoutMs?: number;
  /** Stream storage (default `file`). `memory` does not survive a server restart. */
  storage?: 'file' | 'memory';
  /** Stream replicas in a cluster (default 1). An existing stream with other replicas is refused. */
  replicas?: number;
  /**
   * Delivery claims across processes (see the README, "Several dispatcher processes"): `'auto'` (default)
   * claims once other processes are seen delivering from the same store, `'always'` claims every delivery
   * (the backend then declares `exclusiveClaims`), `false` never claims. `{ mode, ttlMs }` also sets how
   * long an unrenewed claim lives (default 5,000 ms; whole seconds on the server, at least 1 s).
   */
  claims?: 'auto' | 'always' | false | { mode?: 'auto' | 'always'; ttlMs?: number };
  /**
   * Create the streams when missing (default true). With `false` the backend opens an existing store only
   * and writes nothing while opening: a prefix without a store is a `NotFoundError` (`DUETIME_NOT_FOUND`).
   */
  migrate?: boolean;
  /**
   * Ignored: the store no longer materialises a commit log, so nothing can stall.
   * @deprecated since 0.2; removed in 0.3.
   */
  stallMs?: number;
  /**
   * Ignored: the store keeps no index nodes to cache.
   * @deprecated since 0.2; removed in 0.3.
   */
  nodeCacheBytes?: number;
}

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

/** The first server version whose JetStream has what the store stands on (atomic batch publish). */
export const STORE_MIN_SERVER = '2.12.0';

const DUPLICATE_WINDOW_MS = 120_000;

/** An optional whole number of milliseconds that goes to a timer: positive, at most {@link MAX_TIMER_MS}. */
function optionalPositive(field: string, value: unknown, fallback: number): number {
  return value === undefined
    ? fallback
    : duration(field, positiveInteger(field, value), { max: MAX_TIMER_MS });
}

interface Settings {
  claims: ClaimSettings;
  migrate: boolean;
  requestTimeoutMs: number;
  commitTimeoutMs: number;
  replicas: number;
  storage: 'file' | 'memory';
  logger: Logger;
  clock: Clock;
}

const KNOWN_OPTIONS = new Set([
  'prefix',
  'clock',
  'logger',
  'connectTimeoutMs',
  'requestTimeoutMs',
  'commitTimeoutMs',
  'storage',
  'replicas',
  'migrate',
  'claims',
  'stallMs',
  'nodeCacheBytes',
]);

function claimSettings(value: NatsBackendOptions['claims']): ClaimSettings {
  const ttl = (ms: unknown) => {
    if (ms === undefined) return 5000;
    const value = duration('options.claims.ttlMs', positiveInteger('options.claims.ttlMs', ms), {
      max: MAX_TIMER_MS,
    });
    if (value < 1000)
      throw new InvalidArgumentError(
        'options.claims.ttlMs',
        ms,
        'must be at least 1000 (the server counts in seconds)',
      );
    return value;
  };
  if (value === undefined || value === 'auto') return { mode: 'auto', ttlMs: 5000 };
  if (value === 'always') return { mode: 'always', ttlMs: 5000 };
  if (value === false) return { mode: 'off', ttlMs: 5000 };
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const { mode, ttlMs, ...rest } = value;
    const unknown = Object.keys(rest);
    if (unknown.length > 0)
      throw new InvalidArgumentError(
        `options.claims.${unknown[0]}`,
        (rest as Record<string, unknown>)[unknown[0] as string],
        'is not a claims option (mode, ttlMs)',
      );
    if (mode !== undefined && mode !== 'auto' && mode !== 'always')
      throw new InvalidArgumentError('options.claims.mode', mode, "must be 'auto' or 'always'");
    return { mode: mode ?? 'auto', ttlMs: ttl(ttlMs) };
  }
  throw new InvalidArgumentError(
    'options.claims',
    value,
    "must be 'auto', 'always', false or { mode, ttlMs }",
  );
}

/** Checks the target and options, and connects (or takes the application's connection). */
async function prepare(
  target: NatsTarget,
  options: NatsBackendOptions,
): Promise<{ nc: NatsConnection; owned: boolean; layout: Layout; settings: Settings }> {
  if (typeof target !== 'object' || target === null)
    throw new InvalidArgumentError('target', target, 'must be { servers } or { connection }');
  const hasServers = 'servers' in target && target.servers !== undefined;
  const hasConnection = 'connection' in target && target.connection !== undefined;
  if (hasServers === hasConnection)
    throw new InvalidArgumentError('target', target, 'give exactly one of { servers } or { connection }');
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new InvalidArgumentError('options', options, 'must be an object of options');
  for (const name of Object.keys(options))
    if (!KNOWN_OPTIONS.has(name))
      throw new InvalidArgumentError(
        `options.${name}`,
        (options as Record<string, unknown>)[name],
        'is not an option of the NATS backend',
      );
  const layout = makeLayout(options.prefix ?? 'duetime');
  const logger = options.logger ?? silentLogger;
  if (options.migrate !== undefined && typeof options.migrate !== 'boolean')
    throw new InvalidArgumentError('options.migrate', options.migrate, 'must be true or false');
  const settings: Settings = {
    claims: claimSettings(options.claims),
    migrate: options.migrate ?? true,
    requestTimeoutMs: optionalPositive('options.requestTimeoutMs', options.requestTimeoutMs, 5000),
    commitTimeoutMs: optionalPositive('options.commitTimeoutMs', options.commitTimeoutMs, 30_000),
    replicas: optionalPositive('options.replicas', options.replicas, 1),
    storage: options.storage ?? 'file',
    logger,
    clock: options.clock ?? systemClock,
  };
  if (settings.storage !== 'file' && settings.storage !== 'memory')
    throw new InvalidArgumentError('options.storage', settings.storage, 'must be "file" or "memory"');
  for (const name of ['stallMs', 'nodeCacheBytes'] as const)
    if (options[name] !== undefined) {
      positiveInteger(`options.${name}`, options[name]);
      logger.warn(`nats backend: options.${name} is deprecated and ignored (the store no longer needs it)`);
    }

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
  return { nc, owned, layout, settings };
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
export async function createNatsBackend(
  target: NatsTarget,
  options: NatsBackendOptions = {},
): Promise<NatsBackend> {
  const { nc, owned, layout, settings } = await prepare(target, options);
  try {
    return await open(nc, owned, layout, settings);
  } catch (error) {
    if (owned) await nc.close().catch(() => {});
    throw error;
  }
}

/**
 * Opens leases and calendar cursors on NATS without the store, for a calendar `Scheduler`
 * (`new Scheduler({ backend: coordination, ... })`) on any JetStream server, 2.9 included.
 */
export async function createNatsCoordination(
  target: NatsTarget,
  options: Omit<NatsBackendOptions, 'commitTimeoutMs'> = {},
): Promise<NatsCoordination> {
  const { nc, owned, layout, settings } = await prepare(target, options);
  try {
    const io = await NatsIo.open(nc, settings.requestTimeoutMs);
    await ensureLeaseStream(io, layout, settings);
    const serverClock = new ServerClock(io, layout);
    const stopStatus = logConnectionStatus(nc, settings.logger, `nats leases ${layout.prefix}`);
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

async function ensureLeaseStream(io: NatsIo, layout: Layout, s: Settings): Promise<void> {
  if (!s.migrate) {
    await requireStream(io, layout.leaseStream, layout);
    return;
  }
  await io.ensureStream({
    name: layout.leaseStream,
    subjects: [`${layout.prefix}.lease.>`],
    maxPerSubject: 1,
    storage: s.storage,
    replicas: s.replicas,
    duplicateWindowMs: DUPLICATE_WINDOW_MS,
  });
  await ensureAnchor(io, layout.leaseAnchor);
}

/** Refuses a server without what the store needs, naming its version and the missing feature. */
export function requireStoreServer(version: ServerVersion, url: string): void {
  if (!versionAtLeast(version, 2, 12))
    throw new NotSupportedError(
      `the NATS server at ${url} runs ${version.text}; the duetime store needs NATS ${STORE_MIN_SERVER} or later (atomic batch publish, batch direct get and per-message TTLs). Upgrade the server, or use createNatsCoordination() for leases and cursors only`,
    );
}

async function open(nc: NatsConnection, owned: boolean, layout: Layout, s: Settings): Promise<NatsBackend> {
  const version = serverVersion(nc);
  requireStoreServer(version, nc.getServer());
  const io = await NatsIo.open(nc, s.requestTimeoutMs, s.commitTimeoutMs);
  await refuseLegacyStore(io, layout, s.logger);
  let meta: MetaValue;
  if (s.migrate) meta = await ensureStore(io, layout, s, 0);
  else {
    await requireStream(io, layout.storeStream, layout);
    meta = await readMeta(io, layout);
  }
  await ensureLeaseStream(io, layout, s);
  const serverClock = new ServerClock(io, layout);
  const driver = new NatsStoreDriver({
    claims: s.claims,
    io,
    layout,
    versionBase: meta.versionBase,
    logger: s.logger,
    origin: randomBytes(8).toString('hex'),
  });
  const store: Store<undefined> = createStore(driver, { clock: s.clock, logger: s.logger });
  const stopStatus = logConnectionStatus(nc, s.logger, `nats backend ${layout.prefix}`);
  let closing: Promise<void> | undefined;
  return {
    name: 'nats',
    store,
    leases: new NatsLeases(io, layout, serverClock),
    cursors: new NatsCursors(io, layout, serverClock),
    capabilities: {
      multiProcess: true,
      durable: true,
      sql: false,
      exclusiveClaims: s.claims.mode === 'always',
    },
    server: { url: nc.getServer(), version: version.text },
    streams: { store: layout.storeStream, lease: layout.leaseStream },
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

/** Creates (or checks) the store stream and its format record. */
async function ensureStore(
  io: NatsIo,
  layout: Layout,
  s: Pick<Settings, 'storage' | 'replicas'>,
  versionBase: number,
): Promise<MetaValue> {
  await io.ensureStream({
    name: layout.storeStream,
    subjects: layout.storeSubjects,
    maxPerSubject: -1,
    storage: s.storage,
    replicas: s.replicas,
    duplicateWindowMs: DUPLICATE_WINDOW_MS,
    atomic: true,
  });
  return ensureMeta(io, layout, versionBase);
}

/** Refuses to go on when `stream` is missing (opening with `migrate: false`). */
async function requireStream(io: NatsIo, stream: string, layout: Layout): Promise<void> {
  try {
    await io.jsm.streams.info(stream);
  } catch (error) {
    if (!isStreamNotFound(error)) throw io.error(error, `read stream ${stream}`);
    throw new NotFoundError(
      `nats stream ${stream}`,
      `there is no duetime store under prefix ${JSON.stringify(layout.prefix)} on this server (no stream ${stream}); nothing was created`,
    );
  }
}

/**
 * The store's format record: created with the stream (and `versionBase`), read back otherwise. It is
 * never purged, so the stream is never empty and its sequences (the versions) never restart.
 */
export async function ensureMeta(io: NatsIo, layout: Layout, versionBase: number): Promise<MetaValue> {
  const value: MetaValue = { format: 'duetime-nats-store', version: 1, versionBase };
  await whileStarting(() => io.publish(layout.meta, JSON.stringify(value), { expectSubjectSeq: 0 }));
  return whileStarting(() => readMeta(io, layout));
}

async function readMeta(io: NatsIo, layout: Layout): Promise<MetaValue> {
  const m = await io.last(layout.storeStream, layout.meta);
  let meta: MetaValue | undefined;
  try {
    meta = m?.json<MetaValue>();
  } catch {
    meta = undefined;
  }
  if (meta?.format !== 'duetime-nats-store' || typeof meta.versionBase !== 'number')
    throw new CorruptDataError(
      `stream ${layout.storeStream} holds no duetime store format record on ${layout.meta}`,
    );
  if (meta.version !== 1)
    throw new NotSupportedError(
      `stream ${layout.storeStream} holds a store of format ${String(meta.version)}, which this version of @duetime/backend-nats cannot read; upgrade it`,
    );
  return meta;
}

/** An error telling that the prefix holds a store of the earlier format, and how to move it. */
export class LegacyStoreError extends NotSupportedError {
  readonly prefix: string;
  constructor(prefix: string, streams: string[]) {
    super(
      `prefix ${JSON.stringify(prefix)} holds a duetime store of the earlier NATS format (streams ${streams.join(', ')}), which this version does not open. Move its pending schedules and events with: duetime migrate --backend 'nats://<host>:<port>?prefix=${prefix}' (see the backend-nats README, "Upgrading from 0.1")`,
    );
    this.prefix = prefix;
  }
}

async function refuseLegacyStore(io: NatsIo, layout: Layout, logger: Logger): Promise<void> {
  const found: string[] = [];
  for (const name of [layout.legacyStreams.log, layout.legacyStreams.state]) {
    try {
      await io.jsm.streams.info(name);
      found.push(name);
    } catch (error) {
      if (!isStreamNotFound(error)) throw io.error(error, `read stream ${name}`);
    }
  }
  if (found.length === 0) return;
  // Migrated with the old streams kept: the new store is there, the old streams are only left over.
  try {
    await io.jsm.streams.info(layout.storeStream);
    logger.warn(
      `nats backend: the streams ${found.join(', ')} of the earlier format are still there; delete them once nothing runs the old version`,
    );
    return;
  } catch (error) {
    if (!isStreamNotFound(error)) throw io.error(error, `read stream ${layout.storeStream}`);
  }
  throw new LegacyStoreError(layout.prefix, found);
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
    >,
): Promise<MigrationReport> {
  const { dryRun, keepOld, ...rest } = options;
  const { nc, owned, layout, settings } = await prepare(target, rest);
  try {
    return await migrateLegacyNatsStore(
      nc,
      {
        prefix: layout.prefix,
        logger: settings.logger,
        requestTimeoutMs: settings.requestTimeoutMs,
        ...(dryRun !== undefined ? { dryRun } : {}),
        ...(keepOld !== undefined ? { keepOld } : {}),
      },
      {
        ensureStore: (io, l, versionBase) => ensureStore(io, l, settings, versionBase),
        requireServer: requireStoreServer,
      },
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
