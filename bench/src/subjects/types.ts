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
  /**
   * Opens the queue called `name` (its schema, prefix, file or queue name; letters and digits, starting
   * with a letter) instead of fresh data of its own: another process opens the same queue with it.
   */
  name?: string;
  /** `close()` leaves the queue's data in place (for the process that opens it next). */
  keep?: boolean;
}

/**
 * Which settings a peer runs with: `defaults` is what its quick start gives (with the smallest change the
 * workload needs to finish, named in its `tuning`), `best` its documented settings for this kind of work.
 */
export type PeerSettings = 'defaults' | 'best';

export interface Subject {
  /** e.g. `duetime/postgres`, `pg-boss`, `pg-boss/best`. */
  name: string;
  library: 'duetime' | 'bullmq' | 'pg-boss' | 'graphile-worker';
  backend: 'sqlite' | 'postgres' | 'redis' | 'nats';
  /** How it is set up for this comparison (the tuning table of bench/README.md says the same). */
  tuning: string;
  create(options?: CreateOptions): Promise<Queue>;
}

/** One recurring schedule of the recurring workload: a key, a cron expression and the zone it runs in. */
export interface RecurringItem {
  /** Letters, digits and `-` only (every library accepts it as a scheduler id or key). */
  key: string;
  cron: string;
  zone: string;
}

/** What the recurring workload drives: a library's own recurring schedules and a worker for them. */
export interface RecurringQueue {
  /** Creates the recurring schedules (the library's own way, in its bulk form where it has one). */
  schedule(items: RecurringItem[]): Promise<void>;
  /**
   * Starts one worker with a no-op handler that reports each occurrence it starts: the schedule's key and
   * the occurrence's instant (ms since the epoch), or undefined where the handler cannot see it (then
   * {@link RecurringQueue.resolveInstants} fills it in afterwards). Resolves to its stop function.
   */
  startWorker(options: {
    concurrency: number;
    onOccurrence(key: string, instant: number | undefined): void;
  }): Promise<() => Promise<void>>;
  /**
   * For libraries whose handler does not see the occurrence's instant: reads it from the library's own
   * records after the worker stopped and sets `instant` on each delivery (given in the order they started).
   */
  resolveInstants?(deliveries: { key: string; instant?: number }[]): Promise<void>;
  /** Closes connections and removes the data this queue created. */
  close(): Promise<void>;
}

/** A library's recurring schedules under comparison (named like its {@link Subject}, on the same server). */
export interface RecurringSubject {
  name: string;
  library: Subject['library'];
  backend: Subject['backend'];
  /** How it is set up for this comparison (the tuning table of bench/README.md says the same). */
  tuning: string;
  create(): Promise<RecurringQueue>;
}

/** The payload every library carries: the due time plus 64 bytes of padding. */
export function payload(item: Item): { id: string; dueAt: number; pad: string } {
  return { id: item.id, dueAt: item.dueAt, pad: PADDING };
}

export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
export const NATS_NEW_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

/** A comma-separated list of URLs from the environment, or the default ports on loopback. */
function urlList(value: string | undefined, scheme: string, ports: number[]): string[] {
  return (value ?? ports.map((port) => `${scheme}://127.0.0.1:${port}`).join(','))
    .split(',')
    .map((url) => url.trim())
    .filter((url) => url !== '');
}

/** Every node of the Redis Cluster (`bash scripts/services.sh up --clusters`). */
export const REDIS_CLUSTER_URLS = urlList(
  process.env.DUETIME_REDIS_CLUSTER_URLS,
  'redis',
  [7001, 7002, 7003, 7004, 7005, 7006],
);
/** Every server of the NATS cluster (`bash scripts/services.sh up --clusters`). */
export const NATS_CLUSTER_URLS = urlList(process.env.DUETIME_NATS_CLUSTER_URLS, 'nats', [4231, 4232, 4233]);

/** The padding of every payload (64 bytes). */
export const PADDING = 'x'.repeat(64);

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
