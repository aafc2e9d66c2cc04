import { CorruptDataError, type Logger, NotFoundError, NotSupportedError } from '@duetime/core';
import { type ServerVersion, versionAtLeast } from './connection.js';
import { isStreamNotFound } from './errors.js';
import type { NatsIo } from './io.js';
import type { Layout } from './layout.js';
import type { MetaValue } from './store/records.js';
import { ensureAnchor, whileStarting } from './streams.js';

/** Creating and checking the backend's streams when it opens. */

/** The first server version whose JetStream has what the store stands on (atomic batch publish). */
export const STORE_MIN_SERVER = '2.12.0';

const DUPLICATE_WINDOW_MS = 120_000;

/** How the streams are created. */
export interface StreamOptions {
  migrate: boolean;
  storage: 'file' | 'memory';
  replicas: number;
}

export async function ensureLeaseStream(io: NatsIo, layout: Layout, s: StreamOptions): Promise<void> {
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

/** Creates (or checks) the store stream and its format record. */
export async function ensureStore(
  io: NatsIo,
  layout: Layout,
  s: Pick<StreamOptions, 'storage' | 'replicas'>,
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
export async function requireStream(io: NatsIo, stream: string, layout: Layout): Promise<void> {
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

export async function readMeta(io: NatsIo, layout: Layout): Promise<MetaValue> {
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

export async function refuseLegacyStore(io: NatsIo, layout: Layout, logger: Logger): Promise<void> {
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
