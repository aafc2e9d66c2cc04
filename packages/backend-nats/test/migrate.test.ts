import { waitFor } from '@duetime/conformance';
import { Dispatcher, NotFoundError, NotSupportedError } from '@duetime/core';
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { createNatsBackend, LegacyStoreError, migrateNatsStore } from '../src/index.js';
import { writeLegacyStore } from './fixtures/legacy-store.js';
import { storeConnection } from './store-connection.js';

const HOUR = 3_600_000;

describe('moving a store of the earlier NATS format (0.1) to the current one', () => {
  const connection = storeConnection();
  const fresh = () => connection.fresh();

  it('moves pending schedules (versions, attempts, due times) and events, then opens and delivers them', async () => {
    const prefix = fresh();
    const now = Date.now();
    await writeLegacyStore(connection.nc, prefix, {
      version: 41,
      schedules: [
        {
          key: 'order/1/expire',
          at: now - 1000,
          dueAt: now - 1000,
          version: 40,
          attempts: 0,
          message: { type: 'expire', aggregateId: 'o1' },
        },
        {
          key: 'order/2/expire',
          at: now + HOUR,
          dueAt: now + HOUR,
          version: 12,
          attempts: 0,
          message: { type: 'expire', aggregateId: 'o2', data: { n: 2 } },
        },
        {
          key: 'retry/1',
          at: now - 5000,
          dueAt: now + 2 * HOUR,
          version: 41,
          attempts: 3,
          message: { type: 'retry' },
        },
      ],
      deleted: ['order/3/expire'],
      events: [
        { aggregateId: 'o1', type: 'placed', sequence: 1, timestamp: now - 9000 },
        { aggregateId: 'o1', type: 'paid', data: { amount: 5 }, sequence: 2, timestamp: now - 8000 },
        { aggregateId: 'o2', type: 'placed', sequence: 1, timestamp: now - 7000 },
      ],
    });
    // The new version refuses the old store, naming the command.
    await expect(createNatsBackend({ connection: connection.nc }, { prefix })).rejects.toBeInstanceOf(
      LegacyStoreError,
    );

    const dry = await migrateNatsStore({ connection: connection.nc }, { prefix, dryRun: true });
    expect(dry).toMatchObject({
      schedules: 3,
      events: 3,
      aggregates: 2,
      versionBase: 41,
      deleted: [],
      dryRun: true,
    });
    const jsm = await jetstreamManager(connection.nc);
    await expect(jsm.streams.info(`${prefix}_store`)).rejects.toThrow(/not found/);

    const report = await migrateNatsStore({ connection: connection.nc }, { prefix });
    expect(report).toMatchObject({ schedules: 3, events: 3, deleted: [`${prefix}_log`, `${prefix}_state`] });
    // Running it again finds nothing of the old format.
    await expect(migrateNatsStore({ connection: connection.nc }, { prefix })).rejects.toBeInstanceOf(
      NotFoundError,
    );

    const backend = await createNatsBackend({ connection: connection.nc }, { prefix });
    try {
      const { store } = backend;
      expect(await store.loadSchedule('order/3/expire')).toBeUndefined();
      expect(await store.loadSchedule('order/2/expire')).toMatchObject({
        version: 12,
        attempts: 0,
        message: { data: { n: 2 } },
      });
      const retried = await store.loadSchedule('retry/1');
      expect(retried).toMatchObject({ version: 41, attempts: 3 });
      expect(retried?.dueAt.getTime()).toBe(now + 2 * HOUR);
      expect((await store.loadEvents('o1')).map((e) => [e.sequence, e.type])).toEqual([
        [1, 'placed'],
        [2, 'paid'],
      ]);
      // New versions start above the old counter.
      await store.transact((tx) =>
        tx.schedule('order/2/expire', new Date(now + HOUR), { type: 'expire', aggregateId: 'o2' }),
      );
      expect((await store.loadSchedule('order/2/expire'))!.version).toBeGreaterThan(41);
      // What was due is delivered from the due index the migration wrote.
      const delivered: string[] = [];
      const dispatcher = new Dispatcher({
        store,
        processor: async (_tx, _m, { schedule }) => void delivered.push(schedule.key),
      });
      const controller = new AbortController();
      const running = dispatcher.run(controller.signal);
      await waitFor('the migrated due schedule to be delivered', () => delivered.includes('order/1/expire'));
      controller.abort();
      await running;
      expect(delivered).toEqual(['order/1/expire']);
    } finally {
      await backend.close();
    }
  });

  it('refuses an old store that is not at rest: a plan open, or commits not applied yet', async () => {
    const open = fresh();
    await writeLegacyStore(connection.nc, open, { version: 3, schedules: [], openPlan: true });
    await expect(migrateNatsStore({ connection: connection.nc }, { prefix: open })).rejects.toThrow(
      /has a transaction being applied; open it once with @duetime\/backend-nats 0\.1/,
    );
    const waiting = fresh();
    await writeLegacyStore(connection.nc, waiting, { version: 3, schedules: [], unapplied: 2 });
    const error = await migrateNatsStore({ connection: connection.nc }, { prefix: waiting }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NotSupportedError);
    expect((error as Error).message).toMatch(/commits that are not applied yet/);
    // Nothing was written.
    const jsm = await jetstreamManager(connection.nc);
    await expect(jsm.streams.info(`${waiting}_store`)).rejects.toThrow(/not found/);
  });

  it('keeps the old streams when asked, and opens the migrated store beside them', async () => {
    const prefix = fresh();
    await writeLegacyStore(connection.nc, prefix, {
      version: 5,
      schedules: [
        {
          key: 'k',
          at: Date.now() + HOUR,
          dueAt: Date.now() + HOUR,
          version: 5,
          attempts: 0,
          message: { type: 't' },
        },
      ],
    });
    const report = await migrateNatsStore({ connection: connection.nc }, { prefix, keepOld: true });
    expect(report.deleted).toEqual([]);
    const warnings: string[] = [];
    const backend = await createNatsBackend(
      { connection: connection.nc },
      { prefix, logger: { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} } },
    );
    try {
      expect((await backend.store.loadSchedule('k'))?.version).toBe(5);
      expect(warnings.some((w) => /earlier format are still there/.test(w))).toBe(true);
    } finally {
      await backend.close();
    }
  });
});
