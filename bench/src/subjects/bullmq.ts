import { redisKeyBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  type Item,
  PADDING,
  type PeerSettings,
  payload,
  type Queue,
  REDIS_URL,
  type RecurringQueue,
  type RecurringSubject,
  type Subject,
  uniqueName,
} from './types.js';

/** The worker options of each row: `best` deletes a finished job in the call that finishes it. */
function workerOptions(best: boolean) {
  return best ? { removeOnComplete: { count: 0 }, removeOnFail: { count: 0 } } : {};
}

/**
 * A BullMQ `Worker` on queue `name` with a connection of its own (`maxRetriesPerRequest: null`, required
 * for its blocking commands); resolves to its stop function once it is ready.
 */
async function startBullWorker(
  name: string,
  concurrency: number,
  best: boolean,
  handle: (job: { id?: string; data: unknown }) => void,
): Promise<() => Promise<void>> {
  const { Worker } = await import('bullmq');
  const { Redis } = await import('ioredis');
  const workerConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const worker = new Worker(
    name,
    async (job) => {
      handle(job);
    },
    { connection: workerConnection, concurrency, ...workerOptions(best) },
  );
  await worker.waitUntilReady();
  return async () => {
    await worker.close();
    // BullMQ leaves a connection it was given open.
    workerConnection.disconnect();
  };
}

/**
 * BullMQ 6 delayed jobs (`delay`), `addBulk()` for batches, `maxRetriesPerRequest: null` on the worker's
 * connection (required for its blocking commands), worker `concurrency` as given.
 *
 * - `defaults`: its quick start: `Queue` and `Worker` with nothing else set, so finished jobs stay in its
 *   completed set.
 * - `best`: what its docs advise for production and throughput: `removeOnComplete`/`removeOnFail` on the
 *   worker, so a finished job is deleted in the same script call that finishes it and fetches the next.
 *   `stalledInterval` keeps its default (its docs: normally not to be changed) and stalled checks and lock
 *   renewal stay on (`skipStalledCheck`, `skipLockRenewal` would drop the recovery of a crashed worker's
 *   jobs); BullMQ 6 no longer has `skipDelayCheck`. Its docs' other lever is more workers, which the
 *   workloads fix at one.
 */
export function bullmq(settings: PeerSettings): Subject {
  const best = settings === 'best';
  return {
    name: best ? 'bullmq/best' : 'bullmq',
    library: 'bullmq',
    backend: 'redis',
    tuning: best
      ? 'removeOnComplete, removeOnFail; concurrency as given; stalled checks and lock renewal at their defaults'
      : 'defaults (finished jobs kept), concurrency as given',
    async create(options: CreateOptions = {}): Promise<Queue> {
      const { Queue: BullQueue } = await import('bullmq');
      const { Redis } = await import('ioredis');
      const name = options.name ?? uniqueName('bench');
      const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
      const queue = new BullQueue(name, { connection });
      const stops: (() => Promise<void>)[] = [];
      const opts = (item: Item) => ({ delay: Math.max(0, item.dueAt - Date.now()), jobId: item.id });
      return {
        async enqueue(item) {
          await queue.add('job', payload(item), opts(item));
        },
        async enqueueBatch(items) {
          await queue.addBulk(items.map((item) => ({ name: 'job', data: payload(item), opts: opts(item) })));
        },
        async startWorker({ concurrency, onJob }) {
          const stop = await startBullWorker(name, concurrency, best, (job) =>
            onJob((job.data as { dueAt: number }).dueAt),
          );
          stops.push(stop);
          return stop;
        },
        // Every key of the queue: job hashes, the delayed set, its meta and its (capped) event stream.
        storageBytes: () => redisKeyBytes(REDIS_URL, `bull:${name}:*`),
        async close() {
          await Promise.all(stops.map((stop) => stop()));
          if (!options.keep) await queue.obliterate({ force: true });
          await queue.close();
          connection.disconnect();
        },
      };
    },
  };
}

/**
 * BullMQ 6 job schedulers: `upsertJobScheduler(key, { pattern, tz }, { name, data })`, 16 calls in flight
 * (it has no bulk form), one `Worker` with `concurrency` as given; `defaults` and `best` as for
 * {@link bullmq}. The worker that picks up an iteration's job adds the next iteration's job (computed from
 * the later of now and this iteration's instant), so a late iteration skips the ones missed meanwhile; the
 * job is completed apart from the handler's own writes.
 */
export function bullmqSchedulers(settings: PeerSettings): RecurringSubject {
  const best = settings === 'best';
  return {
    name: best ? 'bullmq/best' : 'bullmq',
    library: 'bullmq',
    backend: 'redis',
    tuning: best
      ? 'upsertJobScheduler with pattern and tz; worker removeOnComplete, removeOnFail; concurrency as given'
      : 'upsertJobScheduler with pattern and tz; worker defaults (finished jobs kept), concurrency as given',
    async create(): Promise<RecurringQueue> {
      const { Queue: BullQueue } = await import('bullmq');
      const { Redis } = await import('ioredis');
      const name = uniqueName('benchrec');
      const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
      const queue = new BullQueue(name, { connection });
      const stops: (() => Promise<void>)[] = [];
      return {
        async schedule(items) {
          let next = 0;
          await Promise.all(
            Array.from({ length: 16 }, async () => {
              while (next < items.length) {
                const item = items[next++]!;
                await queue.upsertJobScheduler(
                  item.key,
                  { pattern: item.cron, tz: item.zone },
                  { name: 'job', data: { key: item.key, pad: PADDING } },
                );
              }
            }),
          );
        },
        async startWorker({ concurrency, onOccurrence }) {
          const stop = await startBullWorker(name, concurrency, best, (job) => {
            // A scheduler's job id is `repeat:<scheduler id>:<the iteration's instant in ms>`.
            const instant = Number(job.id?.slice(job.id.lastIndexOf(':') + 1));
            onOccurrence((job.data as { key: string }).key, Number.isFinite(instant) ? instant : undefined);
          });
          stops.push(stop);
          return stop;
        },
        async close() {
          await Promise.all(stops.map((stop) => stop()));
          await queue.obliterate({ force: true });
          await queue.close();
          connection.disconnect();
        },
      };
    },
  };
}
