import { createPostgresBackend } from '@duetime/backend-postgres';
import { fromDrizzle } from '@duetime/bindings/drizzle';
import { fromPglite } from '@duetime/bindings/pglite';
import type { Transaction } from '@duetime/core';
import type { Transaction as PgliteTransaction } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { type Compared, type Row, rowsFor, soloRow } from '../lib/report.js';
import { alternate, type BenchContext } from '../lib/run.js';
import { startedPgBoss } from '../subjects/pg-boss.js';
import { PG_URL, uniqueName } from '../subjects/types.js';
import { ormDrainRows } from './orm-drain.js';

/**
 * One way to commit an application's row and a delayed message in one transaction the application opened
 * with Drizzle (node-postgres), on the shared PostgreSQL server.
 */
interface OrmSubject extends Compared {
  /** Opens the subject; `order(i)` runs one transaction: the row `i` and its message due in an hour. */
  open(): Promise<{ order(i: number): Promise<void>; close(): Promise<void> }>;
}

const HOUR = 3_600_000;

/** Order `i`'s expiry, as every subject schedules it: its key, due in an hour, and its message. */
function expiry(i: number) {
  return {
    key: `order/o-${i}/expire`,
    at: new Date(Date.now() + HOUR),
    message: { type: 'order.expire', aggregateId: `o-${i}` },
  };
}

/** duetime's put of order `i`'s expiry in a transaction (its own, or one it joined). */
function scheduleExpiry(tx: { schedule: Transaction<unknown>['schedule'] }, i: number): Promise<void> {
  const { key, at, message } = expiry(i);
  return tx.schedule(key, at, message);
}

/** The application's table, in `schema`. */
async function ordersTable(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  await pool.query(
    `CREATE TABLE IF NOT EXISTS "${schema}".orders (id text PRIMARY KEY, status text NOT NULL)`,
  );
}

function drop(pool: pg.Pool, ...schemas: string[]): Promise<unknown> {
  return Promise.all(schemas.map((s) => pool.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`)));
}

/**
 * The application's side of a subject: a pool, the orders table in a schema of its own, Drizzle on the
 * pool, and the row each transaction inserts.
 */
async function application(prefix: string) {
  const schema = uniqueName(prefix);
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  await ordersTable(pool, schema);
  const db = drizzle({ client: pool });
  const table = sql.raw(`"${schema}".orders`);
  return {
    schema,
    pool,
    db,
    /** Inserts order `i` through the application's Drizzle transaction `tx`. */
    insert: (tx: { execute(query: ReturnType<typeof sql>): PromiseLike<unknown> }, i: number) =>
      tx.execute(sql`INSERT INTO ${table} (id, status) VALUES (${`o-${i}`}, 'pending')`),
    async close() {
      await drop(pool, schema);
      await pool.end();
    },
  };
}

const DUETIME_DRIZZLE: OrmSubject = {
  name: 'duetime/postgres, store.join(fromDrizzle(tx))',
  library: 'duetime',
  backend: 'postgres-drizzle',
  async open() {
    const app = await application('orm_duetime_');
    const backend = await createPostgresBackend({ pool: app.pool }, { schema: app.schema });
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          await backend.store.join(fromDrizzle(tx), (dt) => scheduleExpiry(dt, i));
        }),
      async close() {
        await backend.close();
        await app.close();
      },
    };
  },
};

const PGBOSS_DRIZZLE: OrmSubject = {
  name: 'pg-boss/best, send(…, { db: fromDrizzle(tx, sql) })',
  library: 'pg-boss',
  backend: 'postgres-drizzle',
  async open() {
    const { fromDrizzle: bossFromDrizzle } = await import('pg-boss');
    const app = await application('orm_pgboss_');
    const boss = await startedPgBoss(app.schema);
    await boss.createQueue('orders');
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          await boss.send(
            'orders',
            { orderId: `o-${i}` },
            { startAfter: new Date(Date.now() + HOUR), db: bossFromDrizzle(tx, sql) },
          );
        }),
      async close() {
        await boss.stop({ graceful: false });
        await app.close();
      },
    };
  },
};

/** The same work through duetime's own transaction and `tx.sql`: what the binding's overhead is measured against. */
const DUETIME_TXSQL: OrmSubject = {
  name: 'duetime/postgres, store.transact with tx.sql',
  library: 'duetime',
  backend: 'postgres-txsql',
  async open() {
    const schema = uniqueName('orm_txsql_');
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    await ordersTable(pool, schema);
    const backend = await createPostgresBackend({ pool }, { schema });
    return {
      order: (i) =>
        backend.store.transact(async (tx) => {
          await tx.sql.query(`INSERT INTO "${schema}".orders (id, status) VALUES ($1, 'pending')`, [
            `o-${i}`,
          ]);
          await scheduleExpiry(tx, i);
        }),
      async close() {
        await backend.close();
        await drop(pool, schema);
        await pool.end();
      },
    };
  },
};

/**
 * duetime's put written by hand in the application's Drizzle transaction: the statement a join of one
 * schedule sends (a call of the schema's `put_schedule`), without duetime's API around it (validation,
 * the transaction's bookkeeping, the binding). `store.join` against this is what the binding and core
 * cost on the same round trips; against `store.transact` with `tx.sql`, the application's own
 * transaction differs too (its BEGIN is a round trip of its own, where duetime's rides with the first
 * statement).
 */
const BY_HAND: OrmSubject = {
  name: "duetime's put by hand in the application's Drizzle transaction",
  library: 'none',
  backend: 'postgres-drizzle',
  async open() {
    const app = await application('orm_byhand_');
    const backend = await createPostgresBackend({ pool: app.pool }, { schema: app.schema });
    const put = sql.raw(`"${app.schema}".put_schedule`);
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          const { key, at, message } = expiry(i);
          const due = at.toISOString();
          await tx.execute(
            sql`SELECT ${put}(${key}::text, ${due}::timestamptz, ${due}::timestamptz, ${JSON.stringify(message)}::text::json, NULL::json, false) AS n`,
          );
        }),
      async close() {
        await backend.close();
        await app.close();
      },
    };
  },
};

/**
 * The cheapest message any library could add to the application's transaction: one plain INSERT of a row
 * (key, due time, JSON) into a table of the application's own, with no index but its key, no version, no
 * notification. What a one-statement enqueue costs on this server and driver, whoever sends it.
 */
const ONE_INSERT: OrmSubject = {
  name: 'one plain INSERT of the message in the application’s Drizzle transaction',
  library: 'none',
  backend: 'postgres-drizzle',
  async open() {
    const app = await application('orm_insert_');
    await app.pool.query(
      `CREATE TABLE "${app.schema}".messages (key text PRIMARY KEY, at timestamptz NOT NULL, message json NOT NULL)`,
    );
    const table = sql.raw(`"${app.schema}".messages`);
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          const { key, at, message } = expiry(i);
          await tx.execute(
            sql`INSERT INTO ${table} (key, at, message) VALUES (${key}, ${at.toISOString()}::timestamptz, ${JSON.stringify(message)}::json)`,
          );
        }),
      close: () => app.close(),
    };
  },
};

/** The application's transaction alone, with no message: the floor every subject above stands on. */
const FLOOR: OrmSubject = {
  name: "the application's Drizzle transaction alone (no message)",
  library: 'none',
  backend: 'postgres-drizzle',
  async open() {
    const app = await application('orm_floor_');
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
        }),
      close: () => app.close(),
    };
  },
};

const SUBJECTS = [DUETIME_DRIZZLE, PGBOSS_DRIZZLE, DUETIME_TXSQL, BY_HAND, ONE_INSERT, FLOOR];

/** An in-memory PGlite database (PostgreSQL in this process) with the application's orders table. */
async function pgliteApplication() {
  const { PGlite } = await import('@electric-sql/pglite');
  const db = await PGlite.create();
  await db.exec('CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)');
  return {
    db,
    /** Inserts order `i` in the application's PGlite transaction `tx`. */
    insert: (tx: PgliteTransaction, i: number) =>
      tx.query(`INSERT INTO orders (id, status) VALUES ($1, 'pending')`, [`o-${i}`]),
  };
}

const DUETIME_PGLITE: OrmSubject = {
  name: 'duetime/pglite, store.join(fromPglite(tx))',
  library: 'duetime',
  backend: 'pglite',
  async open() {
    const app = await pgliteApplication();
    const backend = await createPostgresBackend({ pglite: app.db });
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          await backend.store.join(fromPglite(tx), (dt) => scheduleExpiry(dt, i));
        }),
      async close() {
        await backend.close();
        await app.db.close();
      },
    };
  },
};

const PGBOSS_PGLITE: OrmSubject = {
  name: "pg-boss/best on PGlite (backend: 'pglite'), send(…, { db: fromPglite(tx) })",
  library: 'pg-boss',
  backend: 'pglite',
  async open() {
    const { PgBoss, fromPglite: bossFromPglite } = await import('pg-boss');
    const app = await pgliteApplication();
    const boss = new PgBoss({
      db: bossFromPglite(app.db),
      backend: 'pglite',
      supervise: false,
      schedule: false,
      migrate: true,
    });
    boss.on('error', () => {});
    await boss.start();
    await boss.createQueue('orders');
    return {
      order: (i) =>
        app.db.transaction(async (tx) => {
          await app.insert(tx, i);
          await boss.send(
            'orders',
            { orderId: `o-${i}` },
            { startAfter: new Date(Date.now() + HOUR), db: bossFromPglite(tx as never) },
          );
        }),
      async close() {
        await boss.stop({ graceful: false });
        await app.db.close();
      },
    };
  },
};

/** The application's PGlite transaction alone, with no message. */
const PGLITE_FLOOR: OrmSubject = {
  name: "the application's PGlite transaction alone (no message)",
  library: 'none',
  backend: 'pglite',
  async open() {
    const app = await pgliteApplication();
    return {
      order: (i) => app.db.transaction((tx) => app.insert(tx, i).then(() => {})),
      close: () => app.db.close(),
    };
  },
};

const PGLITE_SUBJECTS = [DUETIME_PGLITE, PGBOSS_PGLITE, PGLITE_FLOOR];

/** Transactions per second, `concurrency` of them at a time, `count` in all. */
async function rate(subject: OrmSubject, count: number, concurrency: number): Promise<number> {
  const opened = await subject.open();
  try {
    for (let i = 0; i < 20; i++) await opened.order(-1 - i); // warm-up: connections, prepared plans
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) await opened.order(next++);
      }),
    );
    return count / ((performance.now() - started) / 1000);
  } finally {
    await opened.close();
  }
}

/**
 * orm: an order row and its expiry in one transaction the application opened with Drizzle, awaited one
 * after another (c1) and 16 at a time (c16): duetime's `store.join` through `@duetime/bindings` against
 * pg-boss 12's `send(…, { db: fromDrizzle(tx, sql) })` on the same server, against the same put written
 * by hand in that transaction (what duetime's API and the binding cost), against one plain INSERT of the
 * message (what a one-statement enqueue costs whoever sends it), and against duetime's own
 * `store.transact` with `tx.sql`. Then the same order and message in a transaction the application opened
 * on an in-memory PGlite database: duetime on PGlite (`fromPglite`) against pg-boss on PGlite
 * (`backend: 'pglite'`, `send(…, { db: fromPglite(tx) })`), awaited (PGlite runs one transaction at a time).
 */
export async function ormWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 300 : 3000;
  const rows: Row[] = [];
  for (const concurrency of [1, 16]) {
    const label = `enqueue in the application's transaction, c${concurrency}`;
    const samples = await alternate(
      ctx,
      SUBJECTS,
      label,
      (subject) => rate(subject, count, concurrency),
      Number.NaN,
      { rotate: true },
    );
    const compared = [DUETIME_DRIZZLE, PGBOSS_DRIZZLE];
    rows.push(...rowsFor('orm', `${label} (Drizzle)`, 'tx/s', 'higher', compared, samples));
    const join = samples.get(DUETIME_DRIZZLE.name)!;
    const own = samples.get(DUETIME_TXSQL.name)!;
    rows.push(
      soloRow('orm', `${label} (duetime's own transaction)`, 'tx/s', 'higher', DUETIME_TXSQL.name, own),
    );
    rows.push(
      soloRow('orm', `${label} (floor: no message)`, 'tx/s', 'higher', FLOOR.name, samples.get(FLOOR.name)!),
    );
    const insert = samples.get(ONE_INSERT.name)!;
    rows.push(
      soloRow('orm', `${label} (one plain INSERT of the message)`, 'tx/s', 'higher', ONE_INSERT.name, insert),
    );
    const hand = samples.get(BY_HAND.name)!;
    rows.push(
      soloRow('orm', `${label} (duetime's put by hand, no API)`, 'tx/s', 'higher', BY_HAND.name, hand),
    );
    rows.push(
      soloRow(
        'orm',
        `${label}: store.join through Drizzle ÷ the same put by hand`,
        'ratio',
        'higher',
        DUETIME_DRIZZLE.name,
        join.map((v, i) => v / (hand[i] ?? Number.NaN)),
      ),
    );
    rows.push(
      soloRow(
        'orm',
        `${label}: store.join through Drizzle ÷ one plain INSERT of the message`,
        'ratio',
        'higher',
        DUETIME_DRIZZLE.name,
        join.map((v, i) => v / (insert[i] ?? Number.NaN)),
      ),
    );
    rows.push(
      soloRow(
        'orm',
        `${label}: store.join through Drizzle ÷ store.transact with tx.sql`,
        'ratio',
        'higher',
        DUETIME_DRIZZLE.name,
        join.map((v, i) => v / (own[i] ?? Number.NaN)),
      ),
    );
  }
  // On PGlite (in memory, one session: one transaction at a time, so awaited only): no disk, no network,
  // the statements' own work.
  const label = "enqueue in the application's PGlite transaction, c1";
  const samples = await alternate(
    ctx,
    PGLITE_SUBJECTS,
    label,
    (subject) => rate(subject, count, 1),
    Number.NaN,
    { rotate: true },
  );
  rows.push(
    ...rowsFor('orm', `${label} (PGlite)`, 'tx/s', 'higher', [DUETIME_PGLITE, PGBOSS_PGLITE], samples),
  );
  rows.push(
    soloRow(
      'orm',
      `${label} (floor: no message)`,
      'tx/s',
      'higher',
      PGLITE_FLOOR.name,
      samples.get(PGLITE_FLOOR.name)!,
    ),
  );
  rows.push(...(await ormDrainRows(ctx)));
  return rows;
}
