import { waitFor } from '@duetime/conformance';
import { createMemoryBackend, Dispatcher, every, Registry, Scheduler, silentLogger } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { startDashboard } from '../src/index.js';

describe('dashboard mounted in the process that runs a scheduler and a dispatcher', () => {
  it("shows the group's leader, history and next occurrences, and the lateness of the dispatcher's deliveries", async () => {
    const backend = createMemoryBackend({ logger: silentLogger });
    const scheduler = new Scheduler({
      registry: new Registry(every('heartbeat', 200, async () => {})),
      backend,
      group: 'ops',
      pollInterval: 100,
      logger: silentLogger,
      telemetry: false,
    });
    const dispatcher = new Dispatcher({
      store: backend.store,
      processor: async () => {},
      logger: silentLogger,
      telemetry: false,
    });
    const ac = new AbortController();
    const runs = Promise.all([scheduler.run(ac.signal), dispatcher.run(ac.signal)]);
    const dashboard = await startDashboard({
      backend,
      port: 0,
      schedulers: [scheduler],
      dispatchers: [dispatcher],
      sampleIntervalMs: 100,
    });
    try {
      const get = async (path: string) => (await fetch(`${dashboard.url}api/${path}`)).json();
      await waitFor('a finished heartbeat', () =>
        scheduler.snapshot().history.some((r) => r.state === 'succeeded'),
      );
      const { groups } = (await get('groups')) as {
        groups: {
          group: string;
          leader?: { owner: string; epoch: number };
          schedules: { id: string; next?: string; cursor?: string }[];
          history?: { schedule: string; state: string }[];
        }[];
      };
      expect(groups).toHaveLength(1);
      const [ops] = groups;
      expect(ops?.group).toBe('ops');
      const snapshot = scheduler.snapshot();
      expect(ops?.leader).toMatchObject({ owner: snapshot.owner, epoch: snapshot.epoch });
      expect(ops?.schedules[0]?.id).toBe('heartbeat');
      expect(ops?.schedules[0]?.next).toMatch(/Z$/);
      expect(ops?.schedules[0]?.cursor).toMatch(/Z$/);
      expect(ops?.history?.some((r) => r.schedule === 'heartbeat' && r.state === 'succeeded')).toBe(true);

      await backend.store.transact(async (tx) => {
        for (let i = 0; i < 5; i++)
          await tx.schedule(`job/${i}`, new Date(Date.now() - 500), { type: 'job' });
      });
      await waitFor('a sample that counted the deliveries', async () => {
        const { samples } = (await get('lateness')) as {
          samples: { delivered?: number; maxLatenessMs?: number }[];
        };
        return samples.some((s) => (s.delivered ?? 0) > 0 && (s.maxLatenessMs ?? 0) >= 500);
      });
      const overview = (await get('overview')) as { dispatchers: { delivered: number }[] };
      expect(overview.dispatchers[0]?.delivered).toBe(5);
    } finally {
      await dashboard.close();
      ac.abort();
      await runs;
    }
  });
});
