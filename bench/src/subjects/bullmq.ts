import { redisKeyBytes } from '../lib/storage.js';
import { type Item, payload, type Queue, REDIS_URL, type Subject, uniqueName } from './types.js';

/**
 * BullMQ delayed jobs. Tuned as its docs recommend for throughput: `maxRetriesPerRequest: null` on the
 * worker connection, `removeOnComplete`/`removeOnFail` so finished jobs don't accumulate, `addBulk` for
 * batches, worker `concurrency` as given.
 */
export const bullmq: Subject = {
  name: 'bullmq',
  library: 'bullmq',
  backend: 'redis',
  tuning: 'delayed jobs; removeOnComplete; addBulk for batches; worker concurrency as given',
  async create(): Promise<Queue> {
    const { Queue: BullQueue, Worker } = await import('bullmq');
    const { Redis } = await import('ioredis');
    const name = uniqueName('bench');
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const queue = new BullQueue(name, {
      connection,
      defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
    });
    const workers: InstanceType<typeof Worker>[] = [];
    const opts = (item: Item) => ({ delay: Math.max(0, item.dueAt - Date.now()), jobId: item.id });
    return {
      async enqueue(item) {
        await queue.add('job', payload(item), opts(item));
      },
      async enqueueBatch(items) {
        await queue.addBulk(items.map((item) => ({ name: 'job', data: payload(item), opts: opts(item) })));
      },
      async startWorker({ concurrency, onJob }) {
        const worker = new Worker(
          name,
          async (job) => {
            onJob((job.data as { dueAt: number }).dueAt);
          },
          { connection: new Redis(REDIS_URL, { maxRetriesPerRequest: null }), concurrency },
        );
        workers.push(worker);
        await worker.waitUntilReady();
        return async () => {
          await worker.close();
        };
      },
      // Every key of the queue: job hashes, the delayed set, its meta and its (capped) event stream.
      storageBytes: () => redisKeyBytes(REDIS_URL, `bull:${name}:*`),
      async close() {
        await Promise.all(workers.map((w) => w.close()));
        await queue.obliterate({ force: true });
        await queue.close();
        connection.disconnect();
      },
    };
  },
};
