import { pgSchemaBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  type Item,
  PG_URL,
  payload,
  type Queue,
  type Subject,
  uniqueName,
  withApplicationName,
} from './types.js';

/**
 * graphile-worker with `runAt`. Tuned per its docs: LISTEN/NOTIFY for new jobs (its default), a 100 ms
 * `pollInterval` for future-dated jobs (its default is 2 s), `concurrency` as given, its `add_jobs()` SQL function for
 * batches, its own schema per run.
 */
export const graphileWorker: Subject = {
  name: 'graphile-worker',
  library: 'graphile-worker',
  backend: 'postgres',
  tuning: 'runAt; pollInterval 100 ms (default 2 s); LISTEN/NOTIFY; add_jobs() for batches',
  async create(options: CreateOptions = {}): Promise<Queue> {
    const { Logger, makeWorkerUtils, run } = await import('graphile-worker');
    const connectionString = withApplicationName(PG_URL, options.applicationName);
    const schema = uniqueName('gw_');
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
          pollInterval: 100,
          noHandleSignals: true,
          logger: silent,
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
        const { Client } = await import('pg');
        const client = new Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await client.end();
        await utils.release();
      },
    };
  },
};
