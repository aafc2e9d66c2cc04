import { createMemoryBackend, type Store } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningDashboard, startDashboard } from '../src/index.js';
import { rawRequest } from './raw-http.js';

const running: RunningDashboard[] = [];
afterEach(async () => {
  for (const d of running.splice(0)) await d.close();
});

const TOKEN = 'a-long-enough-dashboard-token';

async function serve(options: { allowActions?: boolean; token?: string } = {}) {
  const { store } = createMemoryBackend();
  await store.transact((tx) =>
    tx.schedule('order/1/expire', new Date(Date.now() + 3_600_000), { type: 't' }),
  );
  const dashboard = await startDashboard({ backend: { store }, port: 0, ...options });
  running.push(dashboard);
  const host = new URL(dashboard.url).host;
  return { dashboard, store, host };
}

/** A POST to an action, from the page's own origin unless told otherwise. */
function action(
  url: string,
  host: string,
  headers: Record<string, string>,
  body = JSON.stringify({ key: 'order/1/expire' }),
) {
  const head = [
    `POST /api/actions/cancel HTTP/1.1`,
    `Host: ${host}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
  ];
  for (const [name, value] of Object.entries(headers)) head.push(`${name}: ${value}`);
  return rawRequest(url, head, body);
}

async function csrfOf(url: string): Promise<string> {
  return ((await (await fetch(`${url}api/overview`)).json()) as { csrf: string }).csrf;
}

async function stillScheduled(store: Store): Promise<boolean> {
  return (await store.loadSchedule('order/1/expire')) !== undefined;
}

describe('the documented rules, exactly', () => {
  it('read-only: every action request gets 403 before its body is looked at, whatever its method or type', async () => {
    const { dashboard, store, host } = await serve();
    const csrf = await csrfOf(dashboard.url);
    const json = await action(dashboard.url, host, {
      'Content-Type': 'application/json',
      'X-Duetime-Csrf': csrf,
    });
    expect(json.status).toBe(403);
    expect(JSON.parse(json.body).error).toContain('--allow-actions');
    // A text/plain POST (what a cross-site form can send) is refused as read-only, not as 415.
    expect((await action(dashboard.url, host, { 'Content-Type': 'text/plain' })).status).toBe(403);
    expect((await action(dashboard.url, host, {}, 'not json at all')).status).toBe(403);
    const get = await rawRequest(dashboard.url, ['GET /api/actions/cancel HTTP/1.1', `Host: ${host}`]);
    expect(get.status).toBe(403);
    // The body is never read: a request announcing 10 MB and sending 10 bytes is answered at once, and the
    // connection is closed rather than drained.
    const huge = await rawRequest(
      dashboard.url,
      [
        'POST /api/actions/cancel HTTP/1.1',
        `Host: ${host}`,
        'Content-Type: application/json',
        'Content-Length: 10000000',
      ],
      '{"key": "o',
    );
    expect(huge.status).toBe(403);
    expect(huge.headers.connection).toBe('close');
    expect(await stillScheduled(store)).toBe(true);
  });

  it('with actions: Origin null or another origin, or a cross-site fetch, is refused; the page origin passes', async () => {
    const { dashboard, store, host } = await serve({ allowActions: true });
    const csrf = await csrfOf(dashboard.url);
    const base = { 'Content-Type': 'application/json', 'X-Duetime-Csrf': csrf };
    for (const origin of ['null', 'http://evil.example', 'http://127.0.0.1:1', 'garbage']) {
      const refused = await action(dashboard.url, host, { ...base, Origin: origin });
      expect(refused.status, origin).toBe(403);
      expect(JSON.parse(refused.body).error, origin).toBe('cross-origin request refused');
    }
    const crossSite = await action(dashboard.url, host, { ...base, 'Sec-Fetch-Site': 'cross-site' });
    expect(crossSite.status).toBe(403);
    expect((await action(dashboard.url, host, { ...base, 'Sec-Fetch-Site': 'same-site' })).status).toBe(403);
    expect((await action(dashboard.url, host, { ...base, 'X-Duetime-Csrf': 'wrong' })).status).toBe(403);
    expect((await action(dashboard.url, host, { ...base, 'Content-Type': 'text/plain' })).status).toBe(415);
    expect(await stillScheduled(store)).toBe(true);
    const ok = await action(dashboard.url, host, {
      ...base,
      Origin: `http://${host}`,
      'Sec-Fetch-Site': 'same-origin',
    });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toEqual({ key: 'order/1/expire', cancelled: true });
    expect(await stillScheduled(store)).toBe(false);
  });

  it('refuses a body over 16 KiB with 413, before reading it when its length is declared', async () => {
    const { dashboard, host } = await serve({ allowActions: true });
    const csrf = await csrfOf(dashboard.url);
    const big = JSON.stringify({ key: 'k', pad: 'x'.repeat(20_000) });
    const answer = await action(
      dashboard.url,
      host,
      { 'Content-Type': 'application/json', 'X-Duetime-Csrf': csrf },
      big,
    );
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body).error).toContain('16384 bytes');
  });

  it('answers 405 with Allow naming the methods that work', async () => {
    const { dashboard } = await serve({ allowActions: true });
    const page = await fetch(dashboard.url, { method: 'DELETE' });
    expect(page.status).toBe(405);
    expect(page.headers.get('allow')).toBe('GET, HEAD');
    const read = await fetch(`${dashboard.url}api/overview`, { method: 'POST' });
    expect(read.status).toBe(405);
    expect(read.headers.get('allow')).toBe('GET');
    const act = await fetch(`${dashboard.url}api/actions/cancel`);
    expect(act.status).toBe(405);
    expect(act.headers.get('allow')).toBe('POST');
  });

  it('answers 401 with WWW-Authenticate: Bearer, for reads and actions alike', async () => {
    const { dashboard, host } = await serve({ allowActions: true, token: TOKEN });
    const read = await fetch(`${dashboard.url}api/overview`);
    expect(read.status).toBe(401);
    expect(read.headers.get('www-authenticate')).toBe('Bearer');
    const act = await action(dashboard.url, host, { 'Content-Type': 'application/json' });
    expect(act.status).toBe(401);
    expect(act.headers['www-authenticate']).toBe('Bearer');
    const ok = await fetch(`${dashboard.url}api/overview`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('www-authenticate')).toBeNull();
  });
});
