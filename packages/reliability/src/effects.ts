import {
  aggregate,
  type Backend,
  type Message,
  type Schedule,
  type Store,
  type Transaction,
} from '@duetime/core';
import { hasSql, type TargetSpec } from './targets.js';

/**
 * The durable effect of a delivery: one `delivered` event on the message's aggregate, appended in the
 * transaction that consumes the schedule. A message whose effect committed twice shows two events.
 */
export const deliveries = aggregate({
  type: 'reliability-deliveries',
  initial: 0,
  apply: { delivered: (count: number) => count + 1 },
});

/** What a delivery records: which put (or calendar occurrence) it delivered, at which version, where. */
export interface Delivery {
  /** The driver's id for the put delivered (`p<n>`), for schedules the driver made. */
  put?: string;
  /** The calendar occurrence delivered, for ticks enqueued by the scheduler. */
  occurrence?: string;
  at?: number;
  key: string;
  version: number;
  pid: number;
}

/** The message the driver schedules for one put. */
export function putMessage(key: string, put: string): Message {
  return { type: 'reliability.deliver', aggregateId: `fx/${key}`, data: { put } };
}

/** The aggregate holding the deliveries of the driver's `key`. */
export function effectStream(key: string): string {
  return `fx/${key}`;
}

/** The aggregate holding the deliveries of a calendar occurrence. */
export function tickStream(occurrence: string): string {
  return `tick/${occurrence}`;
}

/** The message the scheduler enqueues for a calendar occurrence. */
export function tickMessage(occurrence: string, at: number): Message {
  return { type: 'reliability.tick', aggregateId: tickStream(occurrence), data: { occurrence, at } };
}

interface SqliteSql {
  exec(sql: string): unknown;
  prepare(sql: string): { run(...params: unknown[]): unknown; all(...params: unknown[]): unknown[] };
}
interface PgSql {
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[] }>;
}

function table(spec: TargetSpec): string {
  return spec.kind === 'postgres' ? `"${spec.schema}".reliability_effects` : 'reliability_effects';
}

/**
 * On SQL backends the processor also writes an application row through `tx.sql`: the row and the event
 * must commit together with the consumption (or not at all). Creates that table.
 */
export async function createEffectTable(store: Store, spec: TargetSpec): Promise<void> {
  if (!hasSql(spec)) return;
  const ddl = `CREATE TABLE IF NOT EXISTS ${table(spec)} (stream TEXT NOT NULL, ref TEXT NOT NULL, version BIGINT NOT NULL, pid INTEGER NOT NULL)`;
  await store.transact(async (tx) => {
    if (spec.kind === 'sqlite') (tx.sql as SqliteSql).exec(ddl);
    else await (tx.sql as PgSql).query(ddl);
  });
}

/** The processor's writes for one delivery: the event, and on SQL backends the row. */
export async function recordDelivery(
  tx: Transaction,
  message: Message,
  schedule: Schedule,
  spec: TargetSpec,
): Promise<void> {
  const data = (message.data ?? {}) as { put?: string; occurrence?: string; at?: number };
  const delivery: Delivery = {
    ...(data.put !== undefined ? { put: data.put } : {}),
    ...(data.occurrence !== undefined ? { occurrence: data.occurrence, at: data.at } : {}),
    key: schedule.key,
    version: schedule.version,
    pid: process.pid,
  };
  await tx.exec(deliveries, message.aggregateId ?? schedule.key, (_count, ag) =>
    ag.raise('delivered', delivery),
  );
  if (!hasSql(spec)) return;
  const ref = data.put ?? data.occurrence ?? '';
  const insert = `INSERT INTO ${table(spec)} (stream, ref, version, pid) VALUES `;
  try {
    if (spec.kind === 'sqlite')
      (tx.sql as SqliteSql)
        .prepare(`${insert}(?, ?, ?, ?)`)
        .run(message.aggregateId, ref, schedule.version, process.pid);
    else
      await (tx.sql as PgSql).query(`${insert}($1, $2, $3, $4)`, [
        message.aggregateId,
        ref,
        schedule.version,
        process.pid,
      ]);
  } catch (error) {
    throw new ApplicationSqlError(error);
  }
}

/**
 * An error from the application's own statement on `tx.sql`: the driver's error as it is (duetime
 * documents that it does not wrap them), marked so that the error tally does not blame duetime for it.
 */
export class ApplicationSqlError extends Error {
  constructor(cause: unknown) {
    super(`the application's own SQL failed: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
    this.name = 'ApplicationSqlError';
  }
}

/** Every application row written by deliveries, as `stream ref` strings (SQL backends; else undefined). */
export async function effectRows(backend: Backend, spec: TargetSpec): Promise<string[] | undefined> {
  if (!hasSql(spec)) return undefined;
  const select = `SELECT stream, ref FROM ${table(spec)}`;
  return backend.store.transact(async (tx) => {
    const rows =
      spec.kind === 'sqlite'
        ? ((tx.sql as SqliteSql).prepare(select).all() as { stream: string; ref: string }[])
        : ((await (tx.sql as PgSql).query(select)).rows as { stream: string; ref: string }[]);
    return rows.map((r) => `${r.stream} ${r.ref}`);
  });
}

/** The deliveries recorded on one aggregate. */
export async function loadDeliveries(store: Store, stream: string): Promise<Delivery[]> {
  return (await store.loadEvents(stream))
    .filter((e) => e.type === 'delivered')
    .map((e) => e.data as Delivery);
}
