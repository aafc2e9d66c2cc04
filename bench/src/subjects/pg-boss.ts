import { pgSchemaBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  type Item,
  PG_URL,
  payload,
  type Queue,
  type Subject,
  uniqueName,
} from './types.js';

/**
 * pg-boss with `startAfter`. Tuned per its docs: the minimum polling interval (0.5 s) for the lowest
 * latency, `batchSize` 100 per fetch (it waits a polling interval between fetches) handled `concurrency`
 * jobs at a time, one `work()` subscription, `insert()` for batches,
 * its own schema per run, maintenance and monitoring off during measurement.
 */
export const pgBoss: Subject = {
  name: 'pg-boss',
  library: 'pg-boss',
  backend: 'postgres',
  tuning:
    'startAfter; pollingIntervalSeconds 0.5 (its minimum); batchSize 100 handled `concurrency` at a time; insert() for batches; maintenance off',
  async create(options: CreateOptions = {}): Promise<Queue> {
    const { default: PgBoss } = await import('pg-boss');
    const schema = uniqueName('pgboss_');
    const boss = new PgBoss({
      connectionString: PG_URL,
      schema,
      supervise: false,
      schedule: false,
      migrate: true,
      ...(options.applicationName ? { application_name: options.applicationName } : {}),
    });
    boss.on('error', () => {});
    await boss.start();
    const queue = 'bench';
    await boss.createQueue(queue);
    const job = (item: Item) => ({ name: queue, data: payload(item), startAfter: new Date(item.dueAt) });
    return {
      async enqueue(item) {
        await boss.send(queue, payload(item), { startAfter: new Date(item.dueAt) });
      },
      async enqueueBatch(items) {
        await boss.insert(items.map(job));
      },
      async startWorker({ concurrency, onJob }) {
        // A batch per fetch (pg-boss waits a polling interval between fetches), handled `concurrency` at a time.
        const id = await boss.work(queue, { batchSize: 100, pollingIntervalSeconds: 0.5 }, async (jobs) => {
          for (let i = 0; i < jobs.length; i += concurrency) {
            await Promise.all(
              jobs.slice(i, i + concurrency).map(async (j) => onJob((j.data as { dueAt: number }).dueAt)),
            );
          }
        });
        return async () => {
          await boss.offWork({ id });
        };
      },
      storageBytes: () => pgSchemaBytes(PG_URL, schema),
      async close() {
        await boss.stop({ graceful: false, wait: true });
        const { Client } = await import('pg');
        const client = new Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await client.end();
      },
    };
  },
};
