import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { waitFor } from '@duetime/conformance';
import {
  type Backend,
  createMemoryBackend,
  Dispatcher,
  silentLogger,
  UnrecoverableError,
} from '@duetime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningDashboard, startDashboard } from '../src/index.js';

const TOKEN = 'a-long-enough-dashboard-token';
const HOUR = 3_600_000;
/** 200,000 characters of data: pages carry its first 4,000. */
const HUGE = { blob: 'h'.repeat(200_000) };
const WHOLE = JSON.stringify(HUGE);

/** Two schedules (one huge, one small) and a huge dead letter, made the way deliveries make them. */
async function seed(backend: Backend): Promise<void> {
  await backend.store.transact(async (tx) => {
    await tx.schedule('huge/pending', new Date(Date.now() + HOUR), { type: 'huge', data: HUGE });
    await tx.schedule('small/pending', new Date(Date.now() + HOUR), { type: 'small', data: { a: 1 } });
    await tx.schedule('huge/dead', new Date(Date.now() - 1000), { type: 'dead', data: HUGE });
  });
  const dispatcher = new Dispatcher({
    store: backend.store,
    logger: silentLogger,
    telemetry: false,
    processor: async () => {
      throw new UnrecoverableError('refused');
    },
  });
  const ac = new AbortController();
  const done = dispatcher.run(ac.signal);
  await waitFor('the dead letter', async () => (await backend.store.countDeadLetters()) === 1);
  ac.abort();
  await done;
}

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return {
    status: res.status,
    headers: res.headers,
    body: (await res.json().catch(() => undefined)) as Record<string, unknown> & {
      items?: Record<string, unknown>[];
      item?: Record<string, unknown>;
      error?: string;
    },
  };
}

/** A raw request, to send a Host header fetch would not let through. */
function rawGet(url: string, host: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { host, ...headers } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

function fullValueSuite(name: string, open: () => Promise<Backend>): void {
  describe(`pages and full values on ${name}`, () => {
    let backend: Backend;
    const dashboards: RunningDashboard[] = [];
    beforeAll(async () => {
      backend = await open();
      await seed(backend);
    }, 60_000);
    afterAll(async () => {
      for (const d of dashboards) await d.close();
      await backend?.close();
    });
    const serve = async (options: { token?: string } = {}) => {
      const d = await startDashboard({ backend, port: 0, ...options });
      dashboards.push(d);
      return d;
    };

    it('pages carry the first 4,000 characters of data and say it was cut; single reads answer all of it', async () => {
      const d = await serve();
      const schedules = await get(`${d.url}api/schedules`);
      const byKey = new Map(schedules.body.items?.map((i) => [i.key, i]));
      expect(byKey.get('huge/pending')).toMatchObject({
        type: 'huge',
        data: WHOLE.slice(0, 4000),
        dataCut: true,
      });
      expect(byKey.get('small/pending')).toMatchObject({ data: '{"a":1}' });
      expect(byKey.get('small/pending')).not.toHaveProperty('dataCut');
      const dead = await get(`${d.url}api/dead-letters`);
      expect(dead.body.items?.[0]).toMatchObject({
        key: 'huge/dead',
        data: WHOLE.slice(0, 4000),
        dataCut: true,
      });

      const one = await get(`${d.url}api/schedule?key=${encodeURIComponent('huge/pending')}`);
      expect(one.status).toBe(200);
      expect(one.body.item).toMatchObject({ key: 'huge/pending', type: 'huge', data: WHOLE });
      expect(one.body.item).not.toHaveProperty('dataCut');
      const oneDead = await get(`${d.url}api/dead-letter?key=huge%2Fdead`);
      expect(oneDead.status).toBe(200);
      expect(oneDead.body.item).toMatchObject({
        key: 'huge/dead',
        error: 'UnrecoverableError: refused',
        data: WHOLE,
      });
    });

    it('refuses a missing or bad key with a 400 naming it, and answers 404 for a key holding nothing', async () => {
      const d = await serve();
      for (const route of ['schedule', 'dead-letter']) {
        const missing = await get(`${d.url}api/${route}`);
        expect(missing.status).toBe(400);
        expect(missing.body.error).toContain('invalid key');
        const empty = await get(`${d.url}api/${route}?key=`);
        expect(empty.status).toBe(400);
        expect(empty.body.error).toContain('invalid key');
        expect((await get(`${d.url}api/${route}?key=nothing%2Fhere`)).status).toBe(404);
      }
      // A dead letter is not a pending schedule, and the other way round.
      expect((await get(`${d.url}api/schedule?key=huge%2Fdead`)).status).toBe(404);
      expect((await get(`${d.url}api/dead-letter?key=huge%2Fpending`)).status).toBe(404);
    });

    it('keeps the rules of every read: the token, the Host, GET only, no cross-origin grant', async () => {
      const d = await serve({ token: TOKEN });
      const bearer = { authorization: `Bearer ${TOKEN}` };
      for (const path of ['api/schedule?key=huge%2Fpending', 'api/dead-letter?key=huge%2Fdead']) {
        const refused = await get(`${d.url}${path}`);
        expect(refused.status).toBe(401);
        expect(refused.headers.get('www-authenticate')).toBe('Bearer');
        expect(JSON.stringify(refused.body)).not.toContain('hhhh');
        expect((await get(`${d.url}${path}`, { authorization: `Bearer ${TOKEN}x` })).status).toBe(401);
        const ok = await get(`${d.url}${path}`, { ...bearer, origin: 'https://evil.example' });
        expect(ok.status).toBe(200);
        expect(ok.headers.get('access-control-allow-origin')).toBeNull();
        expect(await rawGet(`${d.url}${path}`, 'evil.example:80', bearer)).toBe(421);
        const post = await fetch(`${d.url}${path}`, { method: 'POST', headers: bearer });
        expect(post.status).toBe(405);
        expect(post.headers.get('allow')).toBe('GET');
      }
    });
  });
}

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

fullValueSuite('SQLite', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'duetime-dashboard-full-'));
  dirs.push(dir);
  return createSqliteBackend({ filename: join(dir, 'store.db') });
});
// The memory backend cuts nothing in a query: core cuts what it loaded, and the page gets the same answers.
fullValueSuite('the memory backend', async () => createMemoryBackend());
