import { pgSchemaBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  type Item,
  type PeerSettings,
  PG_URL,
  payload,
  type Queue,
  type Subject,
  uniqueName,
  withApplicationName,
} from './types.js';

/** Jobs the best row's pool fetches and locks at once (`localQueue.size`). */
const LOCAL_QUEUE_SIZE = 200;

/**
 * graphile-worker 0.18 with `runAt` for delayed jobs, its `add_jobs()` SQL function for batches, its own
 * schema per run. LISTEN/NOTIFY wakes workers for jobs due now (its default); jobs that become due later
 * are found by polling.
 *
 * - `defaults`: `run()` as its quick start calls it, with `concurrency` as given; `pollInterval` stays at
 *   2 s and the pool at 10 connections. Nothing had to change for the workloads to finish.
 * - `best`: its performance page's batching settings, through `preset.worker`: `localQueue: { size: 200 }`
 *   (the pool fetches and locks 200 jobs at a time and hands them to its workers locally) and
 *   `completeJobBatchDelay: 0` (completions of jobs finishing together go in one statement), plus
 *   `pollInterval` 100 ms for jobs that become due later and `maxPoolSize` of concurrency + 2, at least
 *   10 (its documented advice).
 */
export function graphileWorker(settings: PeerSettings): Subject {
  const best = settings === 'best';
  return {
    name: best ? 'graphile-worker/best' : 'graphile-worker',
    library: 'graphile-worker',
    backend: 'postgres',
    tuning: best
      ? `preset.worker: localQueue { size: ${LOCAL_QUEUE_SIZE} }, completeJobBatchDelay 0; pollInterval 100 ms; maxPoolSize max(10, concurrency + 2)`
      : 'defaults (pollInterval 2 s, maxPoolSize 10), concurrency as given',
    async create(options: CreateOptions = {}): Promise<Queue> {
      const { Logger, makeWorkerUtils, run } = await import('graphile-worker');
      const connectionString = withApplicationName(PG_URL, options.applicationName);
      const schema = options.name ?? uniqueName('gw_');
      const utils = await makeWorkerUtils({ connectionString, schema });
      await utils.migrate();
      const runners: Awaited<ReturnType<typeof run>>[] = [];
      const silent = new Logger(() => () => {});
      const spec = (item: Item) => ({
        identifier: 'bench',
        payload: payload(item),
        run_at: new Date(item.dueAt).toISOString(),
      });
      return {
        async enqueue(item) {
          await utils.addJob('bench', payload(item), { runAt: new Date(item.dueAt) });
        },
        async enqueueBatch(items) {
          // Its SQL bulk API, add_jobs(job_spec[]), in one statement.
          await utils.withPgClient((client) =>
            client.query(
              `select "${schema}".add_jobs(array(select json_populate_record(null::"${schema}".job_spec, x) from json_array_elements($1::json) x))`,
              [JSON.stringify(items.map(spec))],
            ),
          );
        },
        async startWorker({ concurrency, onJob }) {
          const runner = await run({
            connectionString,
            schema,
            concurrency,
            noHandleSignals: true,
            logger: silent,
            ...(best
              ? {
                  pollInterval: 100,
                  maxPoolSize: Math.max(10, concurrency + 2),
                  preset: { worker: { localQueue: { size: LOCAL_QUEUE_SIZE }, completeJobBatchDelay: 0 } },
                }
              : {}),
            taskList: {
              bench: async (p) => {
                onJob((p as { dueAt: number }).dueAt);
              },
            },
          });
          runners.push(runner);
          return async () => {
            await runner.stop();
          };
        },
        storageBytes: () => pgSchemaBytes(PG_URL, schema),
        async close() {
          await Promise.all(runners.map((r) => r.stop().catch(() => {})));
          if (!options.keep) {
            const { Client } = await import('pg');
            const client = new Client({ connectionString: PG_URL });
            await client.connect();
            await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
            await client.end();
          }
          await utils.release();
        },
      };
    },
  };
}
