import { createPostgresBackend } from '@duetime/backend-postgres';
import { toDrizzle } from '@duetime/bindings/drizzle';
import { Dispatcher } from '@duetime/core';
import { eq } from 'drizzle-orm';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzleProxy } from 'drizzle-orm/pg-proxy';
import pg from 'pg';
import { type Compared, type Row, rowsFor } from '../lib/report.js';
import { alternate, type BenchContext, sleep } from '../lib/run.js';
import { BEST_WORK, startedPgBoss } from '../subjects/pg-boss.js';
import { PG_URL, uniqueName } from '../subjects/types.js';

/**
 * One way to expire due orders: each due message's processor marks its order `expired`, and that write
 * commits with the message's consumption.
 */
interface DrainSubject extends Compared {
  /** Makes `count` pending orders and their due messages; `start` runs the worker until `stop`. */
  open(count: number): Promise<{
    /** The schema of the orders table. */
    schema: string;
    start(concurrency: number): Promise<() => Promise<void>>;
    close(): Promise<void>;
  }>;
}

/** The application's orders table, in `schema`, with `count` pending orders `o-0` … */
async function pendingOrders(pool: pg.Pool, schema: string, count: number): Promise<void> {
  await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, status text NOT NULL)`);
  await pool.query(
    `INSERT INTO "${schema}".orders (id, status) SELECT 'o-' || i, 'pending' FROM generate_series(0, $1 - 1) i`,
    [count],
  );
}

function ordersOf(schema: string) {
  return pgSchema(schema).table('orders', { id: text('id').primaryKey(), status: text('status').notNull() });
}

/** A processor's write of order `id` on the delivery's client, made once per schema. */
type Expire = (schema: string) => (sql: pg.PoolClient, id: string) => Promise<unknown>;

/**
 * duetime's subject, its processor's write given (through Drizzle, or raw SQL on `tx.sql`); `pipeline`:
 * on a pool whose connections pipeline, with the dispatcher's `pipeline` option (a batch's processors run
 * at once, their statements share round trips).
 */
function duetimeDrain(name: string, backendName: string, write: Expire, pipeline = false): DrainSubject {
  return {
    name,
    library: 'duetime',
    backend: backendName,
    open: (count) => openDuetime(count, write, pipeline),
  };
}

/** Order `id` marked expired through Drizzle on the delivery's transaction. */
const drizzleExpire: Expire = (schema) => {
  const orders = ordersOf(schema);
  return (sql, id) => toDrizzle(sql).update(orders).set({ status: 'expired' }).where(eq(orders.id, id));
};

/** The same UPDATE as pg-boss's handler sends, raw on the delivery's transaction. */
const rawExpire: Expire = (schema) => (sql, id) =>
  sql.query(`UPDATE "${schema}".orders SET status = 'expired' WHERE id = $1`, [id]);

const DUETIME = duetimeDrain(
  'duetime/postgres, processor writing through toDrizzle(tx.sql)',
  'postgres-drizzle',
  drizzleExpire,
);

/** The same UPDATE as pg-boss's handler sends, raw on `tx.sql`: the queue's own part, without the ORM's. */
const DUETIME_RAW = duetimeDrain(
  'duetime/postgres, processor writing raw SQL on tx.sql',
  // Compared with pg-boss's handler sending the same raw SQL.
  'postgres-raw',
  rawExpire,
);

const DUETIME_PIPELINED = duetimeDrain(
  'duetime/postgres, pipeline: true, processor writing through toDrizzle(tx.sql)',
  'postgres-drizzle',
  drizzleExpire,
  true,
);

const DUETIME_RAW_PIPELINED = duetimeDrain(
  'duetime/postgres, pipeline: true, processor writing raw SQL on tx.sql',
  'postgres-raw',
  rawExpire,
  true,
);

async function openDuetime(
  count: number,
  expire: Expire,
  pipeline: boolean,
): ReturnType<DrainSubject['open']> {
  const schema = uniqueName('ormdrain_duetime_');
  const pool = new pg.Pool({ connectionString: PG_URL, max: 20, ...(pipeline ? { pipeline: true } : {}) });
  await pendingOrders(pool, schema, count);
  const backend = await createPostgresBackend({ pool }, { schema });
  const due = new Date(Date.now() - 60_000);
  for (let i = 0; i < count; i += 500)
    await backend.store.transact(async (tx) => {
      for (let j = i; j < Math.min(count, i + 500); j++)
        await tx.schedule(`order/o-${j}/expire`, due, { type: 'order.expire', aggregateId: `o-${j}` });
    });
  const write = expire(schema);
  return {
    schema,
    async start(concurrency) {
      const dispatcher = new Dispatcher({
        store: backend.store,
        concurrency,
        pipeline,
        processor: async (tx, message) => {
          await write(tx.sql, message.aggregateId!);
        },
      });
      const controller = new AbortController();
      const done = dispatcher.run(controller.signal);
      return async () => {
        controller.abort();
        await done;
      };
    },
    async close() {
      await backend.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/**
 * How a pg-boss handler marks order `id` expired on the transaction its worker hands it: raw SQL through
 * `executeSql`, or through Drizzle on that same transaction (pg-boss hands its own database wrapper, not
 * the application's ORM; Drizzle's `pg-proxy` driver sends its statements through `executeSql`). Made once
 * per batch of jobs.
 */
type BossExpire = (schema: string) => (tx: { executeSql: BossSql }) => (id: string) => Promise<unknown>;
type BossSql = (text: string, values?: unknown[]) => Promise<{ rows: unknown[] }>;

const bossRaw: BossExpire = (schema) => (tx) => (id) =>
  tx.executeSql(`UPDATE "${schema}".orders SET status = 'expired' WHERE id = $1`, [id]);

const bossDrizzle: BossExpire = (schema) => {
  const orders = ordersOf(schema);
  return (tx) => {
    const db = drizzleProxy((text, params) => tx.executeSql(text, params));
    return (id) => db.update(orders).set({ status: 'expired' }).where(eq(orders.id, id));
  };
};

/** pg-boss's best batch settings (see the pg-boss subject), with its transactional worker. */
function pgBossDrain(name: string, backendName: string, expire: BossExpire): DrainSubject {
  return {
    name,
    library: 'pg-boss',
    backend: backendName,
    open: (count) => openPgBoss(count, expire),
  };
}

async function openPgBoss(count: number, expire: BossExpire): ReturnType<DrainSubject['open']> {
  const schema = uniqueName('ormdrain_pgboss_');
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  await pendingOrders(pool, schema, count);
  const boss = await startedPgBoss(schema);
  await boss.createQueue('orders');
  for (let i = 0; i < count; i += 500)
    await boss.insert(
      'orders',
      Array.from({ length: Math.min(500, count - i) }, (_, k) => ({ data: { orderId: `o-${i + k}` } })),
    );
  const write = expire(schema);
  return {
    schema,
    async start(concurrency) {
      const id = await boss.work(
        'orders',
        { transactional: true, localConcurrency: concurrency, ...BEST_WORK },
        async (jobs, tx) => {
          const expireOne = write(tx);
          for (const job of jobs) await expireOne((job.data as { orderId: string }).orderId);
        },
      );
      return async () => {
        await boss.offWork('orders', { id, wait: true });
      };
    },
    async close() {
      await boss.stop({ graceful: false });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/** pg-boss's handler writing through Drizzle on its transaction: the same work as duetime's Drizzle rows. */
const PGBOSS = pgBossDrain(
  'pg-boss/best, work(…, { transactional: true }) writing through Drizzle on its tx',
  'postgres-drizzle',
  bossDrizzle,
);

/** pg-boss's handler sending the raw UPDATE on its transaction: the same work as duetime's raw rows. */
const PGBOSS_RAW = pgBossDrain(
  'pg-boss/best, work(…, { transactional: true }) writing raw SQL on its tx',
  'postgres-raw',
  bossRaw,
);

const SUBJECTS = [DUETIME, DUETIME_RAW, DUETIME_PIPELINED, DUETIME_RAW_PIPELINED, PGBOSS, PGBOSS_RAW];

/** Orders per second until every order is `expired`, read from the committed table. */
async function drainRate(subject: DrainSubject, count: number, concurrency: number, timeoutMs: number) {
  const opened = await subject.open(count);
  const watcher = new pg.Pool({ connectionString: PG_URL, max: 1 });
  try {
    const expired = async () =>
      Number(
        (await watcher.query(`SELECT count(*) AS n FROM "${opened.schema}".orders WHERE status = 'expired'`))
          .rows[0].n,
      );
    const started = performance.now();
    const stop = await opened.start(concurrency);
    let done = await expired();
    while (done < count && performance.now() - started < timeoutMs) {
      await sleep(20);
      done = await expired();
    }
    const elapsed = performance.now() - started;
    await stop();
    if (done < count) throw new Error(`${subject.name} expired only ${done} of ${count} orders`);
    return Math.round((count / elapsed) * 1000);
  } finally {
    await watcher.end();
    await opened.close();
  }
}

/**
 * The orm workload's drain: `count` pending orders whose expiry messages are all due; a worker at
 * concurrency 1 and 16 marks each order expired in the transaction that consumes its message. duetime's
 * processor writes through Drizzle on the delivery transaction (`toDrizzle(tx.sql)`), or raw SQL on
 * `tx.sql`; pg-boss's transactional worker does the same on the transaction it hands the handler
 * (through Drizzle's `pg-proxy` driver on its `executeSql`, or raw), and each duetime row is compared
 * with the pg-boss row doing the same work. Orders per second until the table shows every order expired.
 */
export async function ormDrainRows(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 300 : 20_000;
  const rows: Row[] = [];
  for (const concurrency of [1, 16]) {
    const label = `expire ${count.toLocaleString('en-US')} due orders through the ORM, c${concurrency}`;
    const samples = await alternate(
      ctx,
      SUBJECTS,
      label,
      (subject) => drainRate(subject, count, concurrency, ctx.quick ? 60_000 : 600_000),
      Number.NaN,
      { rotate: true },
    );
    rows.push(...rowsFor('orm', label, 'orders/s', 'higher', SUBJECTS, samples));
  }
  return rows;
}
