import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';

const PG_URL = (() => {
  const url = new URL(process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test');
  if (!url.username && !process.env.PGUSER) url.username = process.env.USER ?? userInfo().username;
  return url.toString();
})();
const name = `t${randomBytes(4).toString('hex')}`;
const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const tsx = createRequire(import.meta.url).resolve('tsx');
const children: ChildProcess[] = [];

/** Starts the service in a process of its own on `database`; resolves with its port once it listens. */
async function start(database = PG_URL): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ['--import', tsx, '--conditions=source', main], {
    env: { ...process.env, DUETIME_PG_URL: database, ORDERS_NAME: name, PORT: '0', ORDER_TTL_MS: '1500' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /LISTENING (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`the service exited (${code}) before listening: ${stderr}`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

async function call(url: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${url}${path}`, { method, ...(body ? { body: JSON.stringify(body) } : {}) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const dataDir = mkdtempSync(join(tmpdir(), 'orm-orders-'));

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "orders_${name}" CASCADE`);
  await admin.query(`DROP SCHEMA IF EXISTS "duetime_${name}" CASCADE`);
  await admin.end();
});

describe('the order service on Drizzle (PostgreSQL), over HTTP, killed between steps', () => {
  it('expires unpaid orders and keeps paid ones, across a SIGKILL, each order and its expiry in one transaction', async () => {
    const admin = new pg.Client({ connectionString: PG_URL });
    try {
      await admin.connect();
    } catch (error) {
      throw new Error(
        `PostgreSQL is not reachable at ${PG_URL} (set DUETIME_PG_URL); start it with \`bash scripts/services.sh up\`: ${(error as Error).message}`,
      );
    }
    const schedules = async () =>
      (
        await admin.query<{ key: string }>(`SELECT key FROM "duetime_${name}".schedules ORDER BY key`)
      ).rows.map((r) => r.key);
    const statusOf = async (id: string) =>
      (
        await admin.query<{ status: string }>(`SELECT status FROM "orders_${name}".orders WHERE id = $1`, [
          id,
        ])
      ).rows[0]?.status;

    let service = await start();
    expect((await call(service.url, 'POST', '/orders', { id: 'A' })).status).toBe(201);
    expect((await call(service.url, 'POST', '/orders', { id: 'B' })).status).toBe(201);
    // A second order under the same id is refused: no second row, no second schedule.
    expect((await call(service.url, 'POST', '/orders', { id: 'A' })).status).toBe(409);
    expect(await schedules()).toEqual(['order/A/expire', 'order/B/expire']);
    expect((await call(service.url, 'POST', '/orders/B/pay')).status).toBe(200);
    expect(await schedules()).toEqual(['order/A/expire']);

    // Killed right after placing C: its row and its schedule are both there, or neither.
    expect((await call(service.url, 'POST', '/orders', { id: 'C' })).status).toBe(201);
    service.child.kill('SIGKILL');
    await new Promise((resolve) => service.child.once('exit', resolve));
    expect(await statusOf('C')).toBe('pending');
    expect(await schedules()).toContain('order/C/expire');

    service = await start();
    await until(
      'A and C to expire',
      async () => (await statusOf('A')) === 'expired' && (await statusOf('C')) === 'expired',
    );
    expect(await statusOf('B')).toBe('paid');
    expect((await call(service.url, 'GET', '/orders/C')).body).toEqual({ id: 'C', status: 'expired' });
    // Paying an expired order is refused, and nothing is scheduled again.
    expect((await call(service.url, 'POST', '/orders/A/pay')).status).toBe(409);
    await until('the schedules to be consumed', async () => (await schedules()).length === 0);
    service.child.kill('SIGTERM');
    await new Promise((resolve) => service.child.once('exit', resolve));
    await admin.end();
  }, 90_000);
});

describe('the order service on Drizzle (PGlite on a data directory), over HTTP, killed between steps', () => {
  /** What the data directory holds, read while the service is down (PGlite is one process's database). */
  async function stored(): Promise<{ schedules: string[]; status: Record<string, string> }> {
    const db = await PGlite.create(dataDir);
    try {
      const schedules = (
        await db.query<{ key: string }>(`SELECT key FROM "duetime_${name}".schedules ORDER BY key`)
      ).rows.map((r) => r.key);
      const rows = (
        await db.query<{ id: string; status: string }>(`SELECT id, status FROM "orders_${name}".orders`)
      ).rows;
      return { schedules, status: Object.fromEntries(rows.map((r) => [r.id, r.status])) };
    } finally {
      await db.close();
    }
  }
  const stopped = (service: { child: ChildProcess }, signal: NodeJS.Signals) => {
    service.child.kill(signal);
    return new Promise((resolve) => service.child.once('exit', resolve));
  };

  it('expires unpaid orders and keeps paid ones, across a SIGKILL, each order and its expiry in one transaction', async () => {
    const database = `pglite:${dataDir}`;
    let service = await start(database);
    expect((await call(service.url, 'POST', '/orders', { id: 'A' })).status).toBe(201);
    expect((await call(service.url, 'POST', '/orders', { id: 'B' })).status).toBe(201);
    expect((await call(service.url, 'POST', '/orders', { id: 'A' })).status).toBe(409);
    expect((await call(service.url, 'POST', '/orders/B/pay')).status).toBe(200);
    // Killed right after placing C: its row and its schedule are both there, or neither.
    expect((await call(service.url, 'POST', '/orders', { id: 'C' })).status).toBe(201);
    await stopped(service, 'SIGKILL');
    const afterKill = await stored();
    expect(afterKill.status.C).toBe('pending');
    expect(afterKill.schedules).toContain('order/C/expire');
    expect(afterKill.schedules).not.toContain('order/B/expire');
    expect(afterKill.status.B).toBe('paid');

    service = await start(database);
    const status = async (id: string) => (await call(service.url, 'GET', `/orders/${id}`)).body.status;
    await until(
      'A and C to expire',
      async () => (await status('A')) === 'expired' && (await status('C')) === 'expired',
    );
    expect(await status('B')).toBe('paid');
    expect((await call(service.url, 'POST', '/orders/A/pay')).status).toBe(409);
    await stopped(service, 'SIGTERM');
    expect(await stored()).toEqual({
      schedules: [],
      status: { A: 'expired', B: 'paid', C: 'expired' },
    });
  }, 90_000);
});
