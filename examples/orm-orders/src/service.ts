import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createPostgresBackend } from '@duetime/backend-postgres';
import { fromDrizzle, toDrizzle } from '@duetime/bindings/drizzle';
import { Dispatcher } from '@duetime/core';
import { PGlite } from '@electric-sql/pglite';
import { and, eq, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import pg from 'pg';
import { ordersTable } from './schema.js';

export interface ServiceOptions {
  /** PostgreSQL URL; or `pglite:<directory>`, PostgreSQL in this process on a data directory (PGlite). */
  url: string;
  /** Names the service's schemas: `orders_<name>` for its table, `duetime_<name>` for duetime's. */
  name: string;
  /** Port to listen on (0: any free one). */
  port: number;
  /** How long an unpaid order lives, in ms (default 15 minutes). */
  ttlMs?: number;
}

const expireKey = (id: string) => `order/${id}/expire`;

/**
 * The order service: `POST /orders` places an order and schedules its expiry in one Drizzle transaction,
 * `POST /orders/:id/pay` marks it paid and cancels the expiry in another, `GET /orders/:id` reads it. The
 * dispatcher's processor expires an unpaid order through Drizzle, in the transaction that consumes the
 * schedule.
 */
export async function startService(options: ServiceOptions) {
  const ttlMs = options.ttlMs ?? 15 * 60_000;
  const schema = `orders_${options.name}`;
  const database = await open(options.url);
  const { db } = database;
  const orders = ordersTable(schema);
  await db.execute(sql.raw(`CREATE SCHEMA IF NOT EXISTS "${schema}"`));
  await db.execute(
    sql.raw(`CREATE TABLE IF NOT EXISTS "${schema}".orders (
    id text PRIMARY KEY, status text NOT NULL, placed_at timestamptz NOT NULL DEFAULT now())`),
  );
  const backend = await createPostgresBackend(database.connection, { schema: `duetime_${options.name}` });

  const dispatcher = new Dispatcher({
    store: backend.store,
    // On a server, a batch's processors run at once (their statements share round trips); each is
    // idempotent and independent of the others, as running together asks. PGlite runs one at a time.
    pipeline: database.pipelines,
    processor: async (tx, message) => {
      // Only a pending order expires: one paid meanwhile keeps its status.
      await toDrizzle(tx.sql)
        .update(orders)
        .set({ status: 'expired' })
        .where(and(eq(orders.id, message.aggregateId!), eq(orders.status, 'pending')));
    },
  });
  const stop = new AbortController();
  const dispatching = dispatcher.run(stop.signal);

  async function place(id: string): Promise<number> {
    return db.transaction(async (tx) => {
      const inserted = await tx
        .insert(orders)
        .values({ id, status: 'pending' })
        .onConflictDoNothing()
        .returning();
      if (inserted.length === 0) return 409;
      await backend.store.join(fromDrizzle(tx), (dt) =>
        dt.schedule(expireKey(id), new Date(Date.now() + ttlMs), { type: 'order.expire', aggregateId: id }),
      );
      return 201;
    });
  }

  async function pay(id: string): Promise<number> {
    return db.transaction(async (tx) => {
      const paid = await tx
        .update(orders)
        .set({ status: 'paid' })
        .where(and(eq(orders.id, id), eq(orders.status, 'pending')))
        .returning();
      if (paid.length === 0) return 409;
      await backend.store.join(fromDrizzle(tx), (dt) => dt.cancelSchedule(expireKey(id)));
      return 200;
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const url = new URL(req.url ?? '/', 'http://service');
    const payMatch = /^\/orders\/([\w-]{1,64})\/pay$/.exec(url.pathname);
    const getMatch = /^\/orders\/([\w-]{1,64})$/.exec(url.pathname);
    if (req.method === 'POST' && url.pathname === '/orders') {
      let body = '';
      for await (const chunk of req) body += chunk;
      const id = (JSON.parse(body || '{}') as { id?: unknown }).id;
      if (typeof id !== 'string' || !/^[\w-]{1,64}$/.test(id))
        return send(400, { error: 'id must be 1-64 word characters' });
      const status = await place(id);
      return send(status, status === 201 ? { id, status: 'pending' } : { error: `order ${id} exists` });
    }
    if (req.method === 'POST' && payMatch) {
      const status = await pay(payMatch[1]!);
      return send(status, status === 200 ? { id: payMatch[1], status: 'paid' } : { error: 'not pending' });
    }
    if (req.method === 'GET' && getMatch) {
      const [order] = await db.select().from(orders).where(eq(orders.id, getMatch[1]!));
      return order
        ? send(200, { id: order.id, status: order.status })
        : send(404, { error: 'no such order' });
    }
    send(404, { error: 'not found' });
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: (error as Error).message }));
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;

  return {
    port,
    backend,
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      stop.abort();
      await dispatching;
      await backend.close();
      await database.close();
    },
  };
}

/** Drizzle on either database: the same query builder. */
type Database = PgDatabase<PgQueryResultHKT>;

/**
 * The database and Drizzle on it: a pool of connections that pipeline (the dispatcher's batch sends its
 * processors' UPDATEs together) for a server URL; PGlite on a data directory for `pglite:<directory>`.
 */
async function open(url: string) {
  if (url.startsWith('pglite:')) {
    const pglite = await PGlite.create(url.slice('pglite:'.length));
    return {
      db: drizzlePglite({ client: pglite }) as Database,
      connection: { pglite },
      pipelines: false,
      close: () => pglite.close(),
    };
  }
  const pool = new pg.Pool({ connectionString: url, max: 8, pipeline: true });
  return {
    db: drizzle({ client: pool }) as Database,
    connection: { pool },
    pipelines: true,
    close: () => pool.end(),
  };
}
