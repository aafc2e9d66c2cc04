/** What every library under test is driven through, so each workload runs the same steps on each. */

export interface Item {
  id: string;
  /** When it is due (ms since the epoch). */
  dueAt: number;
}

export interface Queue {
  /** Enqueues one delayed item and resolves when it is durably accepted. */
  enqueue(item: Item): Promise<void>;
  /** Enqueues many items in the library's own bulk form (one round trip or transaction where possible). */
  enqueueBatch(items: Item[]): Promise<void>;
  /** Starts a worker with a no-op handler that reports each item's due time; resolves to its stop function. */
  startWorker(options: { concurrency: number; onJob(dueAt: number): void }): Promise<() => Promise<void>>;
  /**
   * Bytes the server holds for this queue's data: Redis `MEMORY USAGE` of its keys, PostgreSQL relation
   * sizes (tables, indexes, TOAST) of its schema, SQLite pages in use, NATS stream bytes.
   */
  storageBytes(): Promise<number>;
  /** Closes connections and removes the data this queue created. */
  close(): Promise<void>;
}

export interface CreateOptions {
  /** PostgreSQL `application_name` for every connection the library opens (to find its server processes). */
  applicationName?: string;
}

export interface Subject {
  /** e.g. `duetime/postgres`, `pg-boss`. */
  name: string;
  library: 'duetime' | 'bullmq' | 'pg-boss' | 'graphile-worker';
  backend: 'sqlite' | 'postgres' | 'redis' | 'nats';
  /** How it is tuned for this comparison. */
  tuning: string;
  create(options?: CreateOptions): Promise<Queue>;
}

/** The payload every library carries: the due time plus 64 bytes of padding. */
export function payload(item: Item): { id: string; dueAt: number; pad: string } {
  return { id: item.id, dueAt: item.dueAt, pad: PAD };
}

const PAD = 'x'.repeat(64);

export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
export const NATS_NEW_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

export function uniqueName(prefix: string): string {
  return `${prefix}${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

/** `url` with `application_name` set in its query (node-postgres reads it from connection strings). */
export function withApplicationName(url: string, applicationName: string | undefined): string {
  if (!applicationName) return url;
  const parsed = new URL(url);
  parsed.searchParams.set('application_name', applicationName);
  return parsed.toString();
}
