import type { ConstructorOptions, PgBoss } from 'pg-boss';
import { pgSchemaBytes } from '../lib/storage.js';
import {
  type CreateOptions,
  type Item,
  PADDING,
  type PeerSettings,
  PG_URL,
  payload,
  type Queue,
  type RecurringQueue,
  type RecurringSubject,
  type Subject,
  uniqueName,
} from './types.js';

/** Jobs one fetch returns in the defaults row: pg-boss's default is 1 (see `pgBoss`). */
const DEFAULT_ROW_BATCH = 100;
/**
 * Jobs one fetch returns in the best row, fetched back to back while fetches come back full. pg-boss's docs
 * name no value; 500 is the local queue size of graphile-worker's performance page. In short trials on the
 * development machine (20,000 jobs) 200 drained slower at concurrency 1 and 1,000 no faster than 500.
 */
const BEST_BATCH = 500;

/** The `work` options of every best row, beside `localConcurrency` (see {@link pgBoss}). */
export const BEST_WORK = {
  batchSize: BEST_BATCH,
  burstWhenBatchFull: true,
  pollingIntervalSeconds: 0.5,
} as const;

/**
 * A started pg-boss in `schema` of the bench's server, migrated, without its supervisor or its cron
 * timekeeping unless `options` turn them on; errors it emits are left to the workload.
 */
export async function startedPgBoss(
  schema: string,
  options: Omit<ConstructorOptions, 'connectionString' | 'schema'> = {},
): Promise<PgBoss> {
  const { PgBoss } = await import('pg-boss');
  const boss = new PgBoss({
    connectionString: PG_URL,
    schema,
    supervise: false,
    schedule: false,
    migrate: true,
    ...options,
  });
  boss.on('error', () => {});
  await boss.start();
  return boss;
}

/**
 * Starts the worker of each row on `queue` (see {@link pgBoss}) with a handler that calls `handle` with
 * each job's data; resolves to its stop function.
 */
async function startPgBossWorker(
  boss: PgBoss,
  queue: string,
  concurrency: number,
  best: boolean,
  handle: (data: unknown) => void,
): Promise<() => Promise<void>> {
  const id = best
    ? // One polling worker per handler slot, each running its batch one job after another.
      await boss.work(queue, { localConcurrency: concurrency, ...BEST_WORK }, async (jobs) => {
        for (const j of jobs) handle(j.data);
      })
    : // One polling worker; its batch is handled `concurrency` jobs at a time.
      await boss.work(queue, { batchSize: DEFAULT_ROW_BATCH }, async (jobs) => {
        for (let i = 0; i < jobs.length; i += concurrency) {
          await Promise.all(jobs.slice(i, i + concurrency).map(async (j) => handle(j.data)));
        }
      });
  return async () => {
    await boss.offWork(queue, { id, wait: true });
  };
}

/** Drops a pg-boss schema with everything in it. */
async function dropSchema(schema: string): Promise<void> {
  const { Client } = await import('pg');
  const client = new Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
}

/**
 * pg-boss 12 with `startAfter` for delayed jobs, `insert()` for batches, one queue in a schema of its own,
 * maintenance and cron off during measurement (`supervise`, `schedule`).
 *
 * - `defaults`: what its quick start gives (`work()` polls every 2 s) with one change: `batchSize` 100,
 *   handled `concurrency` at a time. At its default `batchSize` of 1 a worker takes one job per polling
 *   interval, so 20,000 jobs would take about 11 hours.
 * - `best`: its documented throughput settings for a backlog: `localConcurrency` workers (one per
 *   handler slot), each fetching `batchSize` 500 and fetching again at once while batches come back full
 *   (`burstWhenBatchFull`), `pollingIntervalSeconds` 0.5 (its minimum) for jobs that become due later.
 *   LISTEN/NOTIFY (`useListenNotify` and the queue's `notify`) is left off: pg-boss notifies only for
 *   jobs due when inserted, and these workloads enqueue delayed jobs or enqueue before the worker starts;
 *   with it on, polling would fall back to `notifyPollingIntervalSeconds` (30 s by default).
 */
export function pgBoss(settings: PeerSettings): Subject {
  const best = settings === 'best';
  return {
    name: best ? 'pg-boss/best' : 'pg-boss',
    library: 'pg-boss',
    backend: 'postgres',
    tuning: best
      ? `localConcurrency = concurrency, batchSize ${BEST_BATCH}, burstWhenBatchFull, pollingIntervalSeconds 0.5`
      : `defaults (pollingIntervalSeconds 2) with batchSize ${DEFAULT_ROW_BATCH}, handled concurrency at a time`,
    async create(options: CreateOptions = {}): Promise<Queue> {
      const schema = options.name ?? uniqueName('pgboss_');
      const boss = await startedPgBoss(
        schema,
        options.applicationName ? { application_name: options.applicationName } : {},
      );
      const queue = 'bench';
      if (!(await boss.getQueue(queue))) await boss.createQueue(queue);
      const job = (item: Item) => ({ data: payload(item), startAfter: new Date(item.dueAt) });
      const dueAt = (j: { data: unknown }) => (j.data as { dueAt: number }).dueAt;
      return {
        async enqueue(item) {
          await boss.send(queue, payload(item), { startAfter: new Date(item.dueAt) });
        },
        async enqueueBatch(items) {
          await boss.insert(queue, items.map(job));
        },
        async startWorker({ concurrency, onJob }) {
          return startPgBossWorker(boss, queue, concurrency, best, (data) => onJob(dueAt({ data })));
        },
        storageBytes: () => pgSchemaBytes(PG_URL, schema),
        async close() {
          await boss.stop({ graceful: false });
          if (!options.keep) await dropSchema(schema);
        },
      };
    },
  };
}

/** The best row's cron pass interval (`cronMonitorIntervalSeconds`; default 30, range 1–45). */
const BEST_CRON_MONITOR_SECONDS = 10;
/** The best row's send-it polling interval (`cronWorkerIntervalSeconds`; default 5, its minimum 1). */
const BEST_CRON_WORKER_SECONDS = 1;
/** pg-boss's internal queue through which its cron pass sends each occurrence's job. */
const SEND_IT = '__pgboss__send-it';

/**
 * pg-boss 12 `schedule(queue, cron, data, { tz, key })`, one schedule per key on one queue, 16 calls in
 * flight (it has no bulk form), with the worker of each row as in {@link pgBoss} and its timekeeping on
 * (`schedule: true`, its default; `supervise` off as in every row).
 *
 * How it fires: a cron pass every `cronMonitorIntervalSeconds` (30 s) reads every schedule and, for each
 * whose latest occurrence lies in the last 60 s, files a job in its internal `__pgboss__send-it` queue
 * (one per schedule and minute, deduplicated by a singleton slot); a worker of that queue, polling every
 * `cronWorkerIntervalSeconds` (5 s) for 50 jobs, sends each to the schedule's queue with the schedule's
 * data. Occurrences no pass saw within their 60 s are skipped (`missed: 'skip'`, the default).
 *
 * - `defaults`: those intervals.
 * - `best`: its docs name the two intervals as the settings for how often schedules are checked and how
 *   often their jobs are sent, without values: `cronWorkerIntervalSeconds` 1 (its minimum: five times the
 *   forwarding rate) and `cronMonitorIntervalSeconds` 10 (an occurrence is seen 5 s after its instant on
 *   average instead of 15 s; every pass evaluates and re-files every schedule, so shorter passes cost
 *   proportionally more).
 *
 * The handler's job carries only the schedule's data, so the occurrence's instant is read afterwards from
 * the send-it jobs (their `slot`, the minute of the occurrence): a schedule's deliveries pair in order with
 * its send-it jobs in slot order, since each sends one job and both queues hand out jobs oldest first.
 */
export function pgBossSchedules(settings: PeerSettings): RecurringSubject {
  const best = settings === 'best';
  return {
    name: best ? 'pg-boss/best' : 'pg-boss',
    library: 'pg-boss',
    backend: 'postgres',
    tuning: best
      ? `schedule() with tz and key; cronMonitorIntervalSeconds ${BEST_CRON_MONITOR_SECONDS}, cronWorkerIntervalSeconds ${BEST_CRON_WORKER_SECONDS}; worker localConcurrency = concurrency, batchSize ${BEST_BATCH}, burstWhenBatchFull, pollingIntervalSeconds 0.5`
      : `schedule() with tz and key; cronMonitorIntervalSeconds 30, cronWorkerIntervalSeconds 5 (defaults); worker pollingIntervalSeconds 2 with batchSize ${DEFAULT_ROW_BATCH}, handled concurrency at a time`,
    async create(): Promise<RecurringQueue> {
      const schema = uniqueName('pgboss_');
      const boss = await startedPgBoss(schema, {
        schedule: true,
        ...(best
          ? {
              cronMonitorIntervalSeconds: BEST_CRON_MONITOR_SECONDS,
              cronWorkerIntervalSeconds: BEST_CRON_WORKER_SECONDS,
            }
          : {}),
      });
      const queue = 'bench';
      await boss.createQueue(queue);
      const stops: (() => Promise<void>)[] = [];
      return {
        async schedule(items) {
          let next = 0;
          await Promise.all(
            Array.from({ length: 16 }, async () => {
              while (next < items.length) {
                const item = items[next++]!;
                await boss.schedule(
                  queue,
                  item.cron,
                  { key: item.key, pad: PADDING },
                  { tz: item.zone, key: item.key },
                );
              }
            }),
          );
        },
        async startWorker({ concurrency, onOccurrence }) {
          const stop = await startPgBossWorker(boss, queue, concurrency, best, (data) =>
            onOccurrence((data as { key: string }).key, undefined),
          );
          stops.push(stop);
          return stop;
        },
        async resolveInstants(deliveries) {
          const { Client } = await import('pg');
          const client = new Client({ connectionString: PG_URL });
          await client.connect();
          const slots = new Map<string, number[]>();
          try {
            const { rows } = await client.query<{ key: string; slot: string }>(
              `SELECT data->>'key' AS key, data->>'slot' AS slot FROM "${schema}".job WHERE name = $1 AND data->>'name' = $2`,
              [SEND_IT, queue],
            );
            for (const { key, slot } of rows) {
              // A slot is UTC wall time, `YYYY-MM-DD HH:MM:SS`.
              const instant = Date.parse(`${slot.replace(' ', 'T')}Z`);
              const list = slots.get(key);
              if (list) list.push(instant);
              else slots.set(key, [instant]);
            }
          } finally {
            await client.end();
          }
          for (const list of slots.values()) list.sort((a, b) => a - b);
          const seen = new Map<string, number>();
          for (const delivery of deliveries) {
            const index = seen.get(delivery.key) ?? 0;
            seen.set(delivery.key, index + 1);
            const instant = slots.get(delivery.key)?.[index];
            if (instant !== undefined) delivery.instant = instant;
          }
        },
        async close() {
          await Promise.all(stops.map((stop) => stop()));
          await boss.stop({ graceful: false });
          await dropSchema(schema);
        },
      };
    },
  };
}
