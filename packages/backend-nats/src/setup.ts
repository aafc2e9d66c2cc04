import { CorruptDataError, type Logger, NotFoundError, NotSupportedError } from '@duetime/core';
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { type ServerVersion, versionAtLeast } from './connection.js';
import { isNotFound } from './errors.js';
import { type BatchMessage, MAX_ATOMIC_BATCH, type NatsIo, ROLLUP } from './io.js';
import type { Layout } from './layout.js';
import { timerMessage } from './store/plan.js';
import { isTombstone, type MetaValue, type RecordValue, timerIdOf } from './store/records.js';
import { addOrRead, whileStarting } from './streams.js';

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
  // An anchor that is never purged (see Layout.leaseAnchor).
  await whileStarting(() => io.publish(layout.leaseAnchor, '', { expectSubjectSeq: 0 }));
}

/** Refuses a server without what the store needs, naming its version and the missing feature. */
export function requireStoreServer(version: ServerVersion, url: string): void {
  if (!versionAtLeast(version, 2, 12))
    throw new NotSupportedError(
      `the NATS server at ${url} runs ${version.text}; the duetime store needs NATS ${STORE_MIN_SERVER} or later (atomic batch publish, batch direct get and per-message TTLs). Upgrade the server, or use createNatsCoordination() for leases and cursors only`,
    );
}

/** The fires consumer's `ack_wait` when none is given: how long an unrenewed claim lives. */
export const DEFAULT_CLAIM_TTL_MS = 30_000;

/**
 * Creates (or checks) the store stream, its format record and the fires consumer. A store of format 1
 * (its own due index and claim markers) is moved to format 2 in place first: see {@link upgradeFormat1}.
 */
export async function ensureStore(
  io: NatsIo,
  layout: Layout,
  s: Pick<StreamOptions, 'storage' | 'replicas'>,
  versionBase: number,
  claimTtlMs = DEFAULT_CLAIM_TTL_MS,
): Promise<MetaValue> {
  await upgradeFormat1(io, layout, claimTtlMs);
  await addCommitMarkers(io, layout);
  await io.ensureStream(storeStream(layout, s));
  const meta = await ensureMeta(io, layout, versionBase);
  await ensureFiresConsumer(io, layout, claimTtlMs);
  return meta;
}

function storeStream(layout: Layout, s: Pick<StreamOptions, 'storage' | 'replicas'>) {
  return {
    name: layout.storeStream,
    subjects: layout.storeSubjects,
    maxPerSubject: -1,
    storage: s.storage,
    replicas: s.replicas,
    duplicateWindowMs: DUPLICATE_WINDOW_MS,
    atomic: true,
    schedules: true,
  };
}

/**
 * The durable pull consumer of the fires: explicit acknowledgements with `ack_wait` = the claims' time to
 * live, delivered again as often as it takes. An existing one with another `ack_wait` takes this one's.
 */
export async function ensureFiresConsumer(io: NatsIo, layout: Layout, claimTtlMs: number): Promise<void> {
  const ackWait = claimTtlMs * 1_000_000;
  await whileStarting(async () => {
    let info: Awaited<ReturnType<typeof io.jsm.consumers.info>> | undefined;
    try {
      info = await io.jsm.consumers.info(layout.storeStream, layout.firesConsumer);
    } catch (error) {
      if (!isNotFound(error)) throw io.error(error, `read consumer ${layout.firesConsumer}`);
    }
    if (info && info.config.ack_wait === ackWait) return;
    if (info) {
      await io.jsm.consumers.update(layout.storeStream, layout.firesConsumer, { ack_wait: ackWait });
      return;
    }
    await addOrRead(
      () =>
        io.jsm.consumers.add(layout.storeStream, {
          durable_name: layout.firesConsumer,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          filter_subject: layout.fires,
          ack_wait: ackWait,
          max_deliver: -1,
          max_ack_pending: -1,
        }),
      () => io.jsm.consumers.info(layout.storeStream, layout.firesConsumer),
      (error) => io.error(error, `create consumer ${layout.firesConsumer}`),
    );
  });
}

/**
 * Moves a store of format 1 to format 2 in place (once; a rerun or a concurrent one does the same again):
 * message schedules are turned on for the stream (they cannot be turned off again), every live record
 * gets its timer, the format record says 2, and the subjects of the old due index and claim markers are
 * purged and dropped from the stream. Processes of the earlier version must be stopped first: they write
 * records without timers.
 */
async function upgradeFormat1(io: NatsIo, layout: Layout, claimTtlMs: number): Promise<void> {
  const config = (await io.findStream(layout.storeStream))?.config;
  // No stream, or not a store of format 1 (or one moved already): nothing to do here; ensureStream checks
  // the rest.
  if (!config || !layout.format1Subjects.every((subject) => config.subjects?.includes(subject))) return;
  const meta = await readMeta(io, layout);
  const subjects = [...new Set([...(config.subjects ?? []), ...layout.storeSubjects])];
  await io.jsm.streams.update(layout.storeStream, { ...config, subjects, allow_msg_schedules: true });
  await ensureFiresConsumer(io, layout, claimTtlMs);
  let batch: BatchMessage[] = [];
  const flush = async () => {
    if (batch.length > 0) await io.atomicPublish(batch);
    batch = [];
  };
  for await (const m of io.scan(layout.storeStream, layout.recordFilter(''))) {
    if (isTombstone(m)) continue;
    const r = m.json<RecordValue>();
    batch.push(timerMessage(layout, layout.keyOfRecord(m.subject), r.due, timerIdOf(m), 0));
    if (batch.length >= MAX_ATOMIC_BATCH) await flush();
  }
  await flush();
  if (meta.version === 1) {
    const old = await io.last(layout.storeStream, layout.meta);
    const value: MetaValue = { ...meta, version: 2 };
    // Another process moving it at once wrote it first: the same record.
    await io.publish(layout.meta, JSON.stringify(value), {
      ...(old ? { expectSubjectSeq: old.seq } : {}),
      headers: ROLLUP,
    });
  }
  for (const filter of layout.format1Subjects) await io.purge(layout.storeStream, { filter });
  const now = await io.jsm.streams.info(layout.storeStream);
  await io.jsm.streams.update(layout.storeStream, { ...now.config, subjects: [...layout.storeSubjects] });
}

/**
 * Adds the commit markers' subject to a store of format 2 made before the store wrote them (its subjects
 * otherwise the store's own). Processes of the earlier version that run go on (they write no markers); one
 * started afterwards refuses the stream (its subjects differ).
 */
export async function addCommitMarkers(io: NatsIo, layout: Layout, add = true): Promise<void> {
  const config = (await io.findStream(layout.storeStream))?.config;
  if (!config) return;
  const subjects = config.subjects ?? [];
  if (subjects.includes(layout.commits)) return;
  if (!subjects.every((subject) => layout.storeSubjects.includes(subject))) return;
  if (!add)
    throw new NotSupportedError(
      `stream ${layout.storeStream} has no subject for commit markers (${layout.commits}); open it once with migrate: true to add it`,
    );
  await io.jsm.streams.update(layout.storeStream, { ...config, subjects: [...layout.storeSubjects] });
}

/** Refuses to go on when `stream` is missing (opening with `migrate: false`). */
export async function requireStream(io: NatsIo, stream: string, layout: Layout): Promise<void> {
  if (!(await io.findStream(stream)))
    throw new NotFoundError(
      `nats stream ${stream}`,
      `there is no duetime store under prefix ${JSON.stringify(layout.prefix)} on this server (no stream ${stream}); nothing was created`,
    );
}

/**
 * The store's format record: created with the stream (and `versionBase`), read back otherwise. It is
 * never purged, so the stream is never empty and its sequences (the versions) never restart.
 */
export async function ensureMeta(io: NatsIo, layout: Layout, versionBase: number): Promise<MetaValue> {
  const value: MetaValue = { format: 'duetime-nats-store', version: 2, versionBase };
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
  if (meta.version !== 1 && meta.version !== 2)
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
  for (const name of [layout.legacyStreams.log, layout.legacyStreams.state])
    if (await io.findStream(name)) found.push(name);
  if (found.length === 0) return;
  // Migrated with the old streams kept: the new store is there, the old streams are only left over.
  if (!(await io.findStream(layout.storeStream))) throw new LegacyStoreError(layout.prefix, found);
  logger.warn(
    `nats backend: the streams ${found.join(', ')} of the earlier format are still there; delete them once nothing runs the old version`,
  );
}
