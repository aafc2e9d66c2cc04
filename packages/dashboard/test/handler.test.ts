import { request } from 'node:http';
import { createMemoryBackend, type Logger, ManualClock } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createDashboard,
  type RunningDashboard,
  redactText,
  sameSecret,
  startDashboard,
} from '../src/index.js';

const running: RunningDashboard[] = [];
afterEach(async () => {
  for (const d of running.splice(0)) await d.close();
});

const TOKEN = 'a-long-enough-dashboard-token';

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, body: (await res.json().catch(() => undefined)) as Record<string, unknown> };
}

/** A raw request, to send a Host header fetch would not let through. */
function rawGet(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('dashboard server', () => {
  it('binds 127.0.0.1 by default and refuses another address without a token', async () => {
    const { store, leases, cursors } = createMemoryBackend();
    const d = await startDashboard({ backend: { store, leases, cursors }, port: 0 });
    running.push(d);
    expect(d.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    expect(d.tokenRequired).toBe(false);
    await expect(startDashboard({ backend: { store }, host: '0.0.0.0', port: 0 })).rejects.toThrow(
      /not a loopback address: binding it requires a token/,
    );
    await expect(
      startDashboard({ backend: { store }, host: '0.0.0.0', port: 0, token: 'short' }),
    ).rejects.toThrow(/options.token/);
  });

  it('with a token, answers API requests only with it (Bearer, constant-time compare); the page itself holds no data', async () => {
    const { store } = createMemoryBackend();
    const d = await startDashboard({ backend: { store }, host: '0.0.0.0', port: 0, token: TOKEN });
    running.push(d);
    const base = d.url.replace('0.0.0.0', '127.0.0.1');
    expect((await get(`${base}api/overview`)).status).toBe(401);
    expect((await get(`${base}api/overview`, { authorization: `Bearer ${TOKEN}x` })).status).toBe(401);
    const ok = await get(`${base}api/overview`, { authorization: `Bearer ${TOKEN}` });
    expect(ok.status).toBe(200);
    expect(JSON.stringify(ok.body)).not.toContain(TOKEN);
    const page = await fetch(base);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).not.toContain(TOKEN);
    expect(html).toContain('const TOKEN_REQUIRED = true');
  });

  it('on loopback, refuses requests naming another host (DNS rebinding)', async () => {
    const { store } = createMemoryBackend();
    const d = await startDashboard({ backend: { store }, port: 0 });
    running.push(d);
    expect(await rawGet(`${d.url}api/overview`, 'evil.example:80')).toBe(421);
    expect(await rawGet(`${d.url}api/overview`, 'localhost')).toBe(200);
  });

  it('sends a strict content security policy with a fresh nonce, and escapes < in JSON answers', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    await store.transact((tx) =>
      tx.schedule('k', new Date(clock.now() + 1000), {
        type: 't',
        data: { html: '</script><script>alert(1)</script>' },
      }),
    );
    const d = await startDashboard({ backend: { store }, port: 0 });
    running.push(d);
    const a = await fetch(d.url);
    const b = await fetch(d.url);
    const policy = a.headers.get('content-security-policy') ?? '';
    expect(policy).toContain("default-src 'none'");
    expect(policy).toMatch(/script-src 'nonce-[0-9a-f]{32}'/);
    expect(policy).not.toBe(b.headers.get('content-security-policy'));
    expect(a.headers.get('x-frame-options')).toBe('DENY');
    const raw = await (await fetch(`${d.url}api/schedules`)).text();
    expect(raw).not.toContain('<');
    expect(JSON.parse(raw).items[0].data).toBe('{"html":"</script><script>alert(1)</script>"}');
  });

  it('refuses bad query values with a 400 naming the field, unknown routes with a 404, writes with a 405', async () => {
    const { store } = createMemoryBackend();
    const d = await startDashboard({ backend: { store }, port: 0 });
    running.push(d);
    const limit = await get(`${d.url}api/schedules?limit=0`);
    expect(limit.status).toBe(400);
    expect(limit.body.error).toContain('invalid limit');
    const after = await get(`${d.url}api/schedules?after=garbage`);
    expect(after.status).toBe(400);
    expect(after.body.error).toContain('invalid after');
    expect((await get(`${d.url}api/nope`)).status).toBe(404);
    expect((await fetch(`${d.url}api/overview`, { method: 'DELETE' })).status).toBe(405);
    expect((await fetch(`${d.url}api/actions/cancel`)).status).toBe(403);
  });

  it('never shows or logs a secret: a failing backend gives a generic error, the log has the password redacted', async () => {
    const { store } = createMemoryBackend();
    const warnings: string[] = [];
    const logger: Logger = {
      debug() {},
      info() {},
      warn(message, fields) {
        warnings.push(`${message} ${JSON.stringify(fields)}`);
      },
      error() {},
    };
    const broken = new Proxy(store, {
      get(target, name) {
        if (name === 'pageSchedules')
          return async () => {
            throw new Error('connect failed for postgres://app:s3cr3t-pw@db:5432/app');
          };
        const value = Reflect.get(target, name);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const d = await startDashboard({ backend: { store: broken }, port: 0, logger, secrets: ['s3cr3t-pw'] });
    running.push(d);
    const res = await get(`${d.url}api/schedules`);
    expect(res.status).toBe(502);
    expect(JSON.stringify(res.body)).not.toContain('s3cr3t');
    expect(warnings.join('\n')).toContain('postgres://app:***@db:5432/app');
    expect(warnings.join('\n')).not.toContain('s3cr3t');
  });

  it('is a plain request handler: mounted under a base path in an existing server', async () => {
    const { createServer } = await import('node:http');
    const { store } = createMemoryBackend();
    const handler = createDashboard({ backend: { store }, basePath: '/ops/duetime' });
    const server = createServer((req, res) => {
      if (req.url?.startsWith('/ops/duetime')) handler(req, res);
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as { port: number }).port;
      const page = await fetch(`http://127.0.0.1:${port}/ops/duetime/`);
      expect(await page.text()).toContain('<title>duetime</title>');
      const overview = await get(`http://127.0.0.1:${port}/ops/duetime/api/overview`);
      expect(overview.body).toMatchObject({ pending: { count: 0, more: false }, actions: false });
    } finally {
      handler.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('security helpers', () => {
  it('compares secrets of any length, and redacts URL passwords and given secrets', () => {
    expect(sameSecret(TOKEN, TOKEN)).toBe(true);
    expect(sameSecret(TOKEN, `${TOKEN}!`)).toBe(false);
    expect(sameSecret('', TOKEN)).toBe(false);
    expect(redactText('redis://:hunter22@r:6379/0 and postgres://u:p@h/db')).toBe(
      'redis://:***@r:6379/0 and postgres://u:***@h/db',
    );
    expect(redactText('token abcdef in text', ['abcdef'])).toBe('token *** in text');
  });
});
