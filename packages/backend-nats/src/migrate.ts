import {
  CorruptDataError,
  type Event,
  type Logger,
  type Message,
  NotFoundError,
  NotSupportedError,
} from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { serverVersion } from './connection.js';
import { isStreamNotFound } from './errors.js';
import { type BatchMessage, MAX_ATOMIC_BATCH, NatsIo, ROLLUP, type StoredMessage, uniqueId } from './io.js';
import { layout as makeLayout } from './layout.js';
import { ensureStore, requireStoreServer, type StreamOptions } from './setup.js';
import { timerMessage } from './store/plan.js';
import { encodeEvent, encodeRecord, type RecordValue } from './store/records.js';

/**
 * Moving a store of the earlier NATS format (duetime 0.1: a commit log in `<prefix>_log` applied to
 * materialised state in `<prefix>_state`) to the current one (`<prefix>_store`). What of the old format
 * this needs is written down here, and nowhere else:
 *
 * - `<prefix>.st.head`: the last message is the applied state's meta record (header `Duetime-Kind: meta`,
 *   JSON with `version`, the last version handed out, and `applied`, the last log sequence applied) or,
 *   while a plan is being applied, its plan header (`Duetime-Kind: plan`).
 * - `<prefix>.st.rec.<sha256>`: a schedule, JSON `{ key, at, message, version, attempts, dueAt }`, or a
 *   tombstone (header `Duetime-Deleted`).
 * - `<prefix>.st.ev.<sha256>.<n>`: an event, JSON as core's `Event`.
 * - `<prefix>.log.c`: commit messages; those above `applied` are not applied yet.
 *
 * The migration needs the old store at rest: no plan open and no commit waiting (stop every process of
 * the old version first; one that crashed mid-plan leaves a plan any old-version process finishes when it
 * opens the store). It keeps every version number (the new store numbers new versions above the old
 * counter), writes in atomic batches, and can be run again after an interruption: it rewrites the same
 * records and events, never twice.
 */

export interface MigrationReport {
  prefix: string;
  /** Pending schedules moved. */
  schedules: number;
  /** Events moved, and of how many aggregates. */
  events: number;
  aggregates: number;
  /** The old store's version counter: new versions start above it. */
  versionBase: number;
  /** The old streams deleted (none with `keepOld` or `dryRun`). */
  deleted: string[];
  dryRun: boolean;
}

export interface MigrationOptions {
  prefix: string;
  /** Only read the old store and report what would move. */
  dryRun?: boolean;
  /** Keep the old streams after moving (by default they are deleted once everything is written). */
  keepOld?: boolean;
  logger?: Logger;
  requestTimeoutMs?: number;
}

interface OldRecord {
  key: string;
  at: number;
  message: Message;
  version: number;
  attempts: number;
  dueAt: number;
}

/**
 * Moves the pending schedules and the events of the old-format store under `prefix` into the current
 * format, on the same server (NATS 2.12 or later). See the module comment for what it requires.
 *
 * @throws {NotFoundError} when there is no old-format store under the prefix.
 * @throws {NotSupportedError} when the old store is not at rest, or the server is too old.
 */
export async function migrateLegacyNatsStore(
  nc: NatsConnection,
  options: MigrationOptions,
  streams: Pick<StreamOptions, 'storage' | 'replicas'>,
): Promise<MigrationReport> {
  const layout = makeLayout(options.prefix);
  requireStoreServer(serverVersion(nc), nc.getServer());
  const io = await NatsIo.open(nc, options.requestTimeoutMs ?? 10_000);
  const p = layout.prefix;
  const { log, state } = layout.legacyStreams;
  if (!(await io.findStream(state)))
    throw new NotFoundError(
      `nats stream ${state}`,
      `there is no store of the earlier format under prefix ${JSON.stringify(p)} (no stream ${state})`,
    );

  const head = await io.last(state, `${p}.st.head`);
  if (head?.header('Duetime-Kind') !== 'meta')
    throw new NotSupportedError(
      `the old store under prefix ${JSON.stringify(p)} has a transaction being applied; open it once with @duetime/backend-nats 0.1 (any process finishes it), stop every old process, and run the migration again`,
    );
  const meta = head.json<{ version?: unknown; applied?: unknown }>();
  if (typeof meta.version !== 'number' || typeof meta.applied !== 'number')
    throw new CorruptDataError(`the old store's meta record on ${p}.st.head is not readable`);
  if (await io.findStream(log)) {
    const waiting = await io.range(log, `${p}.log.c`, meta.applied + 1, 1);
    if (waiting.messages.length > 0)
      throw new NotSupportedError(
        `the old store under prefix ${JSON.stringify(p)} has commits that are not applied yet; open it once with @duetime/backend-nats 0.1 (a read applies them), stop every old process, and run the migration again`,
      );
  }

  const records = new Map<string, StoredMessage>();
  for await (const m of io.scan(state, `${p}.st.rec.>`)) records.set(m.subject, m);
  const schedules: OldRecord[] = [];
  for (const m of records.values()) {
    if (m.header('Duetime-Deleted') !== undefined || m.data.length === 0) continue;
    const r = m.json<OldRecord>();
    if (typeof r?.key !== 'string' || typeof r.at !== 'number' || typeof r.version !== 'number')
      throw new CorruptDataError(`message ${m.seq} on ${m.subject} is not a schedule of the old format`);
    schedules.push(r);
  }
  const events = new Map<string, Event>();
  for await (const m of io.scan(state, `${p}.st.ev.>`)) {
    const e = m.json<Event>();
    if (typeof e?.aggregateId !== 'string' || typeof e.sequence !== 'number')
      throw new CorruptDataError(`message ${m.seq} on ${m.subject} is not an event of the old format`);
    events.set(`${e.aggregateId}\u0000${e.sequence}`, e);
  }
  const report: MigrationReport = {
    prefix: p,
    schedules: schedules.length,
    events: events.size,
    aggregates: new Set([...events.values()].map((e) => e.aggregateId)).size,
    versionBase: meta.version,
    deleted: [],
    dryRun: options.dryRun === true,
  };
  if (options.dryRun) return report;

  const store = await ensureStore(io, layout, streams, meta.version);
  if (store.versionBase !== meta.version)
    throw new NotSupportedError(
      `stream ${layout.storeStream} already holds a store that was not made by this migration (its versions start at ${store.versionBase}, the old store's at ${meta.version}); delete it first if it holds nothing you need`,
    );

  // Schedules keep their versions; each batch is atomic (a record with its timer).
  const PER_BATCH = Math.floor(MAX_ATOMIC_BATCH / 2);
  for (let i = 0; i < schedules.length; i += PER_BATCH) {
    const messages: BatchMessage[] = [];
    for (const r of schedules.slice(i, i + PER_BATCH)) {
      const t = uniqueId();
      const value: RecordValue = { at: r.at, due: r.dueAt, m: r.message, n: r.attempts, v: r.version, t };
      messages.push(
        { subject: layout.record(r.key), data: encodeRecord(value), headers: ROLLUP },
        timerMessage(layout, r.key, r.dueAt, t, 0),
      );
    }
    await publish(io, messages);
  }
  const ordered = [...events.values()].sort((a, b) =>
    a.aggregateId < b.aggregateId ? -1 : a.aggregateId > b.aggregateId ? 1 : a.sequence - b.sequence,
  );
  for (let i = 0; i < ordered.length; i += MAX_ATOMIC_BATCH) {
    await publish(
      io,
      ordered.slice(i, i + MAX_ATOMIC_BATCH).map((e) => ({
        subject: layout.event(e.aggregateId, e.sequence),
        data: encodeEvent(e),
        // A rerun writes the same event again in place.
        headers: ROLLUP,
      })),
    );
  }
  options.logger?.info('nats store migrated', { ...report });
  if (!options.keepOld)
    for (const name of [log, state]) {
      try {
        await io.jsm.streams.delete(name);
        report.deleted.push(name);
      } catch (error) {
        if (!isStreamNotFound(error)) throw io.error(error, `delete the old stream ${name}`);
      }
    }
  return report;
}

async function publish(io: NatsIo, messages: BatchMessage[]): Promise<void> {
  const result = await io.atomicPublish(messages);
  if (result.kind === 'conflict')
    throw new CorruptDataError(`the migration's batch was refused: ${result.description}`);
}
