import { waitFor } from '@duetime/conformance';
import { Dispatcher, NotSupportedError } from '@duetime/core';
import { jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { createNatsBackend } from '../src/index.js';
import { storeConnection } from './store-connection.js';

const HOUR = 3_600_000;

/**
 * A store of format 1 as the previous release wrote it: its own due index (`q.<hour>.<second>`, `h.<hour>`)
 * and claim markers (`c.<key>`), no timers. Two records: one due a minute ago, one due in an hour.
 */
async function writeFormat1Store(nc: NatsConnection, p: string): Promise<{ due: number; later: number }> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({
    name: `${p}_store`,
    subjects: [`${p}.s.>`, `${p}.q.>`, `${p}.h.>`, `${p}.e.>`, `${p}.x.>`, `${p}.c.>`, `${p}.meta`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_msgs_per_subject: -1,
    allow_direct: true,
    allow_atomic: true,
    allow_rollup_hdrs: true,
    allow_msg_ttl: true,
    duplicate_window: 120_000_000_000,
  });
  const js = jsm.jetstream();
  const rollup = headers();
  rollup.set('Nats-Rollup', 'sub');
  const due = Date.now() - 60_000;
  const later = Date.now() + HOUR;
  await js.publish(`${p}.meta`, JSON.stringify({ format: 'duetime-nats-store', version: 1, versionBase: 0 }));
  const message = { type: 'upgrade', aggregateId: 'u' };
  await js.publish(`${p}.s.up.due`, JSON.stringify({ at: due, due, m: message, n: 0 }), { headers: rollup });
  await js.publish(`${p}.s.up.later`, JSON.stringify({ at: later, due: later, m: message, n: 0 }), {
    headers: rollup,
  });
  await js.publish(`${p}.q.1.1`, JSON.stringify([['up/due', due]]));
  await js.publish(`${p}.h.1`, '', { headers: rollup });
  await js.publish(`${p}.c.up.due`, JSON.stringify({ s: 2 }), { headers: rollup });
  return { due, later };
}

describe('a store of format 1 (a due index of its own)', () => {
  const connection = storeConnection();
  const fresh = () => connection.fresh();

  it('is moved to format 2 in place when opened: timers for its records, its index and markers gone, then delivered', async () => {
    const p = fresh();
    const { later } = await writeFormat1Store(connection.nc, p);
    const backend = await createNatsBackend(
      { connection: connection.nc },
      { prefix: p, claims: { ttlMs: 5000 } },
    );
    try {
      const jsm = await jetstreamManager(connection.nc);
      const info = await jsm.streams.info(`${p}_store`, { subjects_filter: `${p}.>` });
      expect(info.config.allow_msg_schedules).toBe(true);
      expect(info.config.subjects).toEqual([
        `${p}.s.>`,
        `${p}.t.>`,
        `${p}.f.>`,
        `${p}.e.>`,
        `${p}.x.>`,
        `${p}.meta`,
        `${p}.d`,
      ]);
      const kinds = new Set(Object.keys(info.state.subjects ?? {}).map((s) => s.split('.')[1]));
      expect([...kinds].filter((k) => k === 'q' || k === 'h' || k === 'c')).toEqual([]);
      // The pending one waits on its timer; the due one fired.
      expect(Object.keys(info.state.subjects ?? {})).toContain(`${p}.t.up.later`);
      const meta = await jsm.streams.getMessage(`${p}_store`, { last_by_subj: `${p}.meta` });
      expect(meta?.json<{ version: number }>().version).toBe(2);
      // Versions are kept (record sequences, as format 1 numbered them).
      expect((await backend.store.loadSchedule('up/due'))?.version).toBe(2);

      const delivered: string[] = [];
      const controller = new AbortController();
      const dispatcher = new Dispatcher({
        store: backend.store,
        processor: async (_tx, _m, { schedule }) => {
          delivered.push(`${schedule.key}@${schedule.version}`);
        },
      });
      const running = dispatcher.run(controller.signal);
      await waitFor('the due schedule delivered', () => delivered.length > 0);
      controller.abort();
      await running;
      expect(delivered).toEqual(['up/due@2']);
      expect(await backend.store.loadSchedule('up/due')).toBeUndefined();
      expect((await backend.store.loadSchedule('up/later'))?.dueAt.getTime()).toBe(later);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it('is refused when opened with migrate: false, naming how to move it', async () => {
    const p = fresh();
    await writeFormat1Store(connection.nc, p);
    const error = await createNatsBackend({ connection: connection.nc }, { prefix: p, migrate: false }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NotSupportedError);
    expect((error as Error).message).toMatch(/format 1.*migrate: true/);
  });
});

describe('a store of format 2 made before commit markers', () => {
  const connection = storeConnection();

  /** A store of format 2 as it was before commit markers: opened, then its `d` subject taken away. */
  async function withoutMarkers(p: string): Promise<void> {
    const backend = await createNatsBackend({ connection: connection.nc }, { prefix: p });
    await backend.store.transact((tx) =>
      tx.schedule('before/1', new Date(Date.now() + HOUR), { type: 'b', aggregateId: 'b' }),
    );
    await backend.close();
    const jsm = await jetstreamManager(connection.nc);
    const { config } = await jsm.streams.info(`${p}_store`);
    await jsm.streams.update(`${p}_store`, {
      ...config,
      subjects: config.subjects.filter((s) => s !== `${p}.d`),
    });
  }

  it('gets the markers’ subject when opened, and commits', async () => {
    const p = connection.fresh();
    await withoutMarkers(p);
    const backend = await createNatsBackend({ connection: connection.nc }, { prefix: p });
    try {
      const jsm = await jetstreamManager(connection.nc);
      expect((await jsm.streams.info(`${p}_store`)).config.subjects).toContain(`${p}.d`);
      await backend.store.transact((tx) =>
        tx.schedule('after/1', new Date(Date.now() + HOUR), { type: 'a', aggregateId: 'a' }),
      );
      expect(await backend.store.countSchedules()).toBe(2);
    } finally {
      await backend.close();
    }
  });

  it('is refused when opened with migrate: false, naming the subject and how to add it', async () => {
    const p = connection.fresh();
    await withoutMarkers(p);
    const error = await createNatsBackend({ connection: connection.nc }, { prefix: p, migrate: false }).then(
      (backend) => backend.close(),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NotSupportedError);
    expect((error as Error).message).toContain(`${p}.d`);
    expect((error as Error).message).toContain('migrate: true');
  });
});
