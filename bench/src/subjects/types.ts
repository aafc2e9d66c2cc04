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
  /** Closes connections and removes the data this queue created. */
  close(): Promise<void>;
}

export interface Subject {
  /** e.g. `duetime/postgres`, `pg-boss`. */
  name: string;
  library: 'duetime' | 'bullmq' | 'pg-boss' | 'graphile-worker';
  backend: 'sqlite' | 'postgres' | 'redis' | 'nats';
  /** How it is tuned for this comparison. */
  tuning: string;
  create(): Promise<Queue>;
}

/** The payload every library carries: the due time plus 64 bytes of padding. */
export function payload(item: Item): { id: string; dueAt: number; pad: string } {
  return { id: item.id, dueAt: item.dueAt, pad: PAD };
}

const PAD = 'x'.repeat(64);

export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';

export function uniqueName(prefix: string): string {
  return `${prefix}${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}
