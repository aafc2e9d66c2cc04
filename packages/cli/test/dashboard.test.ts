import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { afterAll, describe, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-dashboard-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const require = createRequire(import.meta.url);
const bin = fileURLToPath(new URL('../src/bin.ts', import.meta.url));

function cli(args: string[], env: Record<string, string> = {}) {
  const child = spawn(
    process.execPath,
    ['--import', pathToFileURL(require.resolve('tsx')).href, '--conditions=source', bin, ...args],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    err += c;
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exit, out: () => out, err: () => err };
}

async function until(what: string, check: () => boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('duetime dashboard (real processes)', () => {
  it('serves the store read-only on 127.0.0.1 until SIGTERM, and refuses actions', async () => {
    const file = join(dir, 'store.db');
    const backend = await createSqliteBackend({ filename: file });
    await backend.store.transact((tx) =>
      tx.schedule('invoice/9/remind', new Date(Date.now() + 60_000), { type: 'invoice.remind' }),
    );
    await backend.close();
    const run = cli(['dashboard', '--backend', `sqlite:${file}`, '--port', '0']);
    await until('the URL', () => /http:\/\/127\.0\.0\.1:\d+\//.test(run.out()));
    await until('the start-up notes', () => run.err().includes('to stop'));
    const url = /http:\/\/127\.0\.0\.1:\d+\//.exec(run.out())?.[0] as string;
    expect(run.err()).toContain('read-only');
    const overview = (await (await fetch(`${url}api/overview`)).json()) as Record<string, unknown>;
    expect(overview).toMatchObject({ pending: { count: 1 }, actions: false, backend: 'sqlite' });
    const list = (await (await fetch(`${url}api/schedules`)).json()) as { items: { key: string }[] };
    expect(list.items.map((i) => i.key)).toEqual(['invoice/9/remind']);
    const refused = await fetch(`${url}api/actions/cancel`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-duetime-csrf': String(overview.csrf) },
      body: JSON.stringify({ key: 'invoice/9/remind' }),
    });
    expect(refused.status).toBe(403);
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
    expect(run.err()).toContain('stopped');
    const after = await createSqliteBackend({ filename: file });
    expect(await after.store.loadSchedule('invoice/9/remind')).toBeDefined();
    await after.close();
  }, 90_000);

  it('refuses to bind beyond loopback without a token, and never creates a store', async () => {
    const open = cli([
      'dashboard',
      '--backend',
      `sqlite:${join(dir, 'x.db')}`,
      '--host',
      '0.0.0.0',
      '--port',
      '0',
    ]);
    expect(await open.exit).toBe(3);
    expect(open.err()).toContain('requires --token');
    const missing = join(dir, 'missing.db');
    const none = cli(['dashboard', '--backend', `sqlite:${missing}`, '--port', '0']);
    expect(await none.exit).toBe(1);
    expect(none.err()).toContain('nothing to show');
    expect(existsSync(missing)).toBe(false);
  }, 90_000);

  it('with a token on 0.0.0.0, says so at start-up and answers only with the token; the password of the URL is never shown', async () => {
    const file = join(dir, 'token.db');
    const backend = await createSqliteBackend({ filename: file });
    await backend.close();
    const token = 'cli-dashboard-token-0123456789';
    const run = cli(['dashboard', '--backend', `sqlite:${file}`, '--host', '0.0.0.0', '--port', '0'], {
      DUETIME_DASHBOARD_TOKEN: token,
    });
    await until('the URL', () => /http:\/\/0\.0\.0\.0:\d+\//.test(run.out()));
    await until('the start-up notes', () => run.err().includes('to stop'));
    expect(run.err()).toContain('a token is required');
    expect(run.err()).toContain('reachable beyond this machine');
    expect(run.out() + run.err()).not.toContain(token);
    const port = /:(\d+)\//.exec(run.out())?.[1];
    const base = `http://127.0.0.1:${port}/`;
    expect((await fetch(`${base}api/overview`)).status).toBe(401);
    expect(
      (await fetch(`${base}api/overview`, { headers: { authorization: `Bearer ${token}` } })).status,
    ).toBe(200);
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
  }, 90_000);
});
