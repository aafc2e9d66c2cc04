import { createMemoryBackend, intervalFrom, ManualClock, recurring, type Store } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningDashboard, startDashboard } from '../src/index.js';

const running: RunningDashboard[] = [];
afterEach(async () => {
  for (const d of running.splice(0)) await d.close();
});

const START = Date.UTC(2030, 0, 1);
const MINUTE = 60_000;

/** The store with its reads of whole pages (messages included) refused: what is left reads heads only. */
function headsOnly(store: Store): Store {
  return new Proxy(store, {
    get(target, name) {
      if (name === 'pageSchedules' || name === 'pageDeadLetters' || name === 'listSchedules')
        return () => Promise.reject(new Error(`${String(name)} reads messages`));
      const value = Reflect.get(target, name, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

async function seeded() {
  const clock = new ManualClock(START);
  const backend = createMemoryBackend({ clock });
  const big = { blob: 'x'.repeat(200_000) };
  await backend.store.transact(async (tx) => {
    for (let i = 0; i < 5; i++)
      await tx.schedule(`due/${i}`, new Date(START - (i + 1) * MINUTE), { type: 'due', data: big });
    for (let i = 0; i < 3; i++)
      await tx.schedule(`later/${i}`, new Date(START + (i + 1) * MINUTE), { type: 'later', data: big });
  });
  return { backend, clock };
}

describe('dashboard totals and lateness read heads only', () => {
  it('counts pending and due schedules and tells the oldest due one without reading a message', async () => {
    const { backend } = await seeded();
    const d = await startDashboard({
      backend: { store: headsOnly(backend.store) },
      port: 0,
      countLimit: 6,
      sampleIntervalMs: 60_000,
    });
    running.push(d);
    const overview = (await (await fetch(`${d.url}api/overview`)).json()) as Record<string, unknown>;
    expect(overview).toMatchObject({
      pending: { count: 6, more: true },
      due: { count: 5, more: false },
      deadLetters: { count: 0, more: false },
      oldestDue: new Date(START - 5 * MINUTE).toISOString(),
    });
    const lateness = (await (await fetch(`${d.url}api/lateness`)).json()) as {
      samples: { due: number; oldestDueMs: number }[];
    };
    expect(lateness.samples.at(-1)).toMatchObject({ due: 5, oldestDueMs: 5 * MINUTE });
  });
});

describe('dashboard actions: pause, resume, trigger', () => {
  it('pauses, resumes and triggers a schedule when actions are enabled; a missing key is a 404', async () => {
    const { backend } = await seeded();
    await backend.store.transact((tx) =>
      tx.schedule('report/hourly', recurring(intervalFrom(60 * MINUTE, new Date(START + 30 * MINUTE))), {
        type: 'report',
      }),
    );
    const d = await startDashboard({ backend, port: 0, allowActions: true });
    running.push(d);
    const { csrf } = (await (await fetch(`${d.url}api/overview`)).json()) as { csrf: string };
    const act = async (name: string, key: string) => {
      const res = await fetch(`${d.url}api/actions/${name}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-duetime-csrf': csrf },
        body: JSON.stringify({ key }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const row = async (key: string) => {
      const page = (await (
        await fetch(`${d.url}api/schedules?prefix=${encodeURIComponent(key)}`)
      ).json()) as { items: { key: string; paused?: string; queued?: number }[] };
      return page.items.find((s) => s.key === key);
    };

    expect(await act('pause', 'report/hourly')).toEqual({
      status: 200,
      body: { key: 'report/hourly', paused: true },
    });
    expect((await row('report/hourly'))?.paused).toBe(new Date(START).toISOString());
    expect((await act('pause', 'report/hourly')).body).toEqual({ key: 'report/hourly', paused: false });
    const trigger = await act('trigger', 'report/hourly');
    expect(trigger.status).toBe(200);
    expect(trigger.body.occurrence).toMatch(/^[0-9a-f]{32}$/);
    expect((await row('report/hourly'))?.queued).toBe(1);
    expect(await act('resume', 'report/hourly')).toEqual({
      status: 200,
      body: { key: 'report/hourly', resumed: true, caughtUp: [] },
    });
    expect((await row('report/hourly'))?.paused).toBeUndefined();
    for (const name of ['pause', 'resume', 'trigger']) {
      const missing = await act(name, 'no/such');
      expect(missing.status, name).toBe(404);
      expect(String(missing.body.error), name).toContain('no/such');
    }
    expect((await act('frobnicate', 'report/hourly')).status).toBe(404);
  });

  it('refuses every action while read-only, writing nothing', async () => {
    const { backend } = await seeded();
    const d = await startDashboard({ backend, port: 0 });
    running.push(d);
    for (const name of ['pause', 'resume', 'trigger']) {
      const res = await fetch(`${d.url}api/actions/${name}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ key: 'later/0' }),
      });
      expect(res.status, name).toBe(403);
    }
    expect((await backend.store.loadSchedule('later/0'))?.paused).toBeUndefined();
  });
});
