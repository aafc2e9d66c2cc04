import type { Socket } from 'node:net';
import { waitFor } from '@duetime/conformance';
import { createMemoryBackend, InvalidArgumentError } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningDashboard, type StartDashboardOptions, startDashboard } from '../src/index.js';
import { stalledConnection } from './raw-http.js';

const running: RunningDashboard[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const d of running.splice(0)) await d.close();
});

async function serve(options: Partial<StartDashboardOptions>) {
  const { store } = createMemoryBackend();
  const dashboard = await startDashboard({ backend: { store }, port: 0, ...options });
  running.push(dashboard);
  return dashboard;
}

/** `promise`'s value, or a failure naming `what` once `timeoutMs` passed. */
async function within<T>(what: string, promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

function stalled(url: string, text: string) {
  const connection = stalledConnection(url, text);
  sockets.push(connection.socket);
  return connection;
}

// Each limit is set far below its default (10 s, 30 s, 5 s), and each wait's deadline (8 s or 4 s) lies
// between the two: the connection is cut by the configured limit, whatever the machine's speed.
describe("the dashboard's own server", () => {
  it('cuts off a client that sends its headers too slowly: 408, connection closed', async () => {
    const dashboard = await serve({ headersTimeoutMs: 200, requestTimeoutMs: 400 });
    expect(dashboard.server.headersTimeout).toBe(200);
    expect(dashboard.server.requestTimeout).toBe(400);
    const host = new URL(dashboard.url).host;
    const slow = stalled(dashboard.url, `GET /api/overview HTTP/1.1\r\nHost: ${host}\r\nX-Slow: 1`);
    const cut = await within('the server to close the slow connection', slow.closed, 8_000);
    expect(cut.received).toMatch(/^HTTP\/1\.1 408 /);
    // Never before the configured limit.
    expect(cut.afterMs).toBeGreaterThanOrEqual(200);
  });

  it('cuts off a client that sends its body too slowly: 408, connection closed', async () => {
    const dashboard = await serve({ allowActions: true, headersTimeoutMs: 200, requestTimeoutMs: 400 });
    const host = new URL(dashboard.url).host;
    const { csrf } = (await (await fetch(`${dashboard.url}api/overview`)).json()) as { csrf: string };
    const slow = stalled(
      dashboard.url,
      [
        'POST /api/actions/cancel HTTP/1.1',
        `Host: ${host}`,
        'Content-Type: application/json',
        `X-Duetime-Csrf: ${csrf}`,
        'Content-Length: 100',
        '',
        '{"key": ',
      ].join('\r\n'),
    );
    const cut = await within('the server to close the slow body', slow.closed, 8_000);
    expect(cut.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(cut.afterMs).toBeGreaterThanOrEqual(400);
  });

  it('closes a kept-alive connection left idle past keepAliveTimeoutMs', async () => {
    const dashboard = await serve({ keepAliveTimeoutMs: 100 });
    expect(dashboard.server.keepAliveTimeout).toBe(100);
    const host = new URL(dashboard.url).host;
    const idle = stalled(dashboard.url, `GET /api/overview HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    const closed = await within('the idle connection closed', idle.closed, 4_000);
    // It was answered, kept alive, then closed for idling.
    expect(closed.received).toMatch(/^HTTP\/1\.1 200 /);
    expect(closed.received.toLowerCase()).toContain('connection: keep-alive');
  });

  it('holds at most maxConnections connections: one more is closed at once, and served once one ends', async () => {
    const dashboard = await serve({ maxConnections: 2 });
    const count = () =>
      new Promise<number>((resolve, reject) =>
        dashboard.server.getConnections((error, n) => (error ? reject(error) : resolve(n))),
      );
    const first = stalled(dashboard.url, '');
    stalled(dashboard.url, '');
    await waitFor('two open connections', async () => (await count()) === 2);
    const third = stalled(dashboard.url, '');
    const refused = await within('the third connection closed by the server', third.closed, 8_000);
    expect(refused.received).toBe('');
    expect(await count()).toBe(2);
    first.socket.destroy();
    await waitFor('one connection left', async () => (await count()) === 1);
    const answer = await fetch(`${dashboard.url}api/overview`, { headers: { connection: 'close' } });
    expect(answer.status).toBe(200);
  });

  it('refuses bad limits with a typed error naming the option', async () => {
    const { store } = createMemoryBackend();
    const bad: [Partial<StartDashboardOptions>, string][] = [
      [{ headersTimeoutMs: 0 }, 'options.headersTimeoutMs'],
      [{ headersTimeoutMs: 1.5 }, 'options.headersTimeoutMs'],
      [{ requestTimeoutMs: Number.NaN }, 'options.requestTimeoutMs'],
      [{ keepAliveTimeoutMs: -1 }, 'options.keepAliveTimeoutMs'],
      [{ keepAliveTimeoutMs: 2 ** 31 }, 'options.keepAliveTimeoutMs'],
      [{ headersTimeoutMs: 5_000, requestTimeoutMs: 1_000 }, 'options.requestTimeoutMs'],
      [{ maxConnections: 0 }, 'options.maxConnections'],
      [{ maxConnections: '10' as never }, 'options.maxConnections'],
    ];
    for (const [options, field] of bad) {
      const error = await startDashboard({ backend: { store }, port: 0, ...options }).catch(
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(options)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });
});
