/**
 * The order service on Drizzle and PostgreSQL (see service.ts).
 *
 *   pnpm --filter @duetime/example-orm-orders start      # PGlite in .data/ (no server)
 *   curl -X POST localhost:3000/orders -d '{"id":"ORD-1"}'
 *   curl -X POST localhost:3000/orders/ORD-1/pay
 *
 * Environment: DUETIME_PG_URL (a PostgreSQL server; `pglite:<directory>` for PGlite; default
 * `pglite:.data`), PORT (default 3000; 0 for any), ORDERS_NAME (default `demo`: the schemas orders_demo
 * and duetime_demo), ORDER_TTL_MS (default 15 min).
 */
import { userInfo } from 'node:os';
import { startService } from './service.js';

/** A server URL with the login name as its user when it names none (as psql does); PGlite as it is. */
function database(url: string): string {
  if (url.startsWith('pglite:')) return url;
  const parsed = new URL(url);
  if (!parsed.username && !process.env.PGUSER) parsed.username = process.env.USER ?? userInfo().username;
  return parsed.toString();
}

const service = await startService({
  url: database(process.env.DUETIME_PG_URL ?? 'pglite:.data'),
  name: process.env.ORDERS_NAME ?? 'demo',
  port: Number(process.env.PORT ?? 3000),
  ...(process.env.ORDER_TTL_MS ? { ttlMs: Number(process.env.ORDER_TTL_MS) } : {}),
});
console.log(`LISTENING ${service.port}`);
const shutdown = () => {
  service.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
