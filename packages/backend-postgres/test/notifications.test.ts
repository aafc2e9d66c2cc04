import { randomBytes } from 'node:crypto';
import { freshNamespace, waitFor } from '@duetime/conformance';
import { Dispatcher, type StoreChange } from '@duetime/core';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelFor } from '../src/index.js';
import { adminClient, dropSchemas, open } from './adapter.js';

let admin: pg.Client;
beforeAll(async () => {
  admin = await adminClient();
});
afterAll(async () => {
  await admin.end();
  await dropSchemas();
});

const appName = () => `dt-notify-${randomBytes(3).toString('hex')}`;

async function listenerPids(applicationName: string): Promise<number[]> {
  const result = await admin.query(
    `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
    [applicationName],
  );
  return result.rows.map((r) => r.pid as number);
}

describe('LISTEN/NOTIFY', () => {
  it('names a channel per schema, within PostgreSQL’s 63-byte limit', () => {
    expect(channelFor('duetime')).toBe('duetime:duetime');
    expect(channelFor('a'.repeat(63))).toMatch(/^duetime:[0-9a-f]{40}$/);
    expect(channelFor('a'.repeat(63))).not.toBe(channelFor(`${'a'.repeat(62)}b`));
  });

  it('wakes a dispatcher in another instance on commit, with no rescan to fall back on', async () => {
    const namespace = freshNamespace();
    const b = await open(namespace);
    const applicationName = appName();
    const a = await open(namespace, { applicationName });
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store: a.store,
      rescanInterval: 3_600_000,
      processor: async (_tx, message) => {
        delivered.push(message.aggregateId ?? message.type);
      },
    });
    const controller = new AbortController();
    const running = dispatcher.run(controller.signal);
    try {
      await waitFor(
        'the dispatcher to listen',
        async () => (await listenerPids(applicationName)).length === 1,
      );
      // The dispatcher sleeps for an hour: only a notification can make it deliver this.
      await b.store.transact((tx) =>
        tx.schedule('wake/1', new Date(Date.now() + 50), { type: 't', aggregateId: 'w1' }),
      );
      await waitFor('the remote schedule to be delivered', () => delivered.includes('w1'));
    } finally {
      controller.abort();
      await running;
      await a.close();
      await b.close();
    }
  });

  it('listens only while watched, ignores its own commits, and reconnects after the LISTEN connection is killed', async () => {
    const namespace = freshNamespace();
    const applicationName = appName();
    const a = await open(namespace, { applicationName });
    const b = await open(namespace);
    try {
      expect(await listenerPids(applicationName)).toEqual([]);
      const changes: StoreChange[] = [];
      const unwatch = a.store.onChange((change) => changes.push(change));
      const [pid] = await waitFor('the LISTEN connection', async () => {
        const pids = await listenerPids(applicationName);
        return pids.length === 1 ? pids : undefined;
      });

      const own = new Date(Date.now() + 111_000);
      const theirs = new Date(Date.now() + 222_000);
      await a.store.transact((tx) => tx.schedule('own/1', own, { type: 't', aggregateId: 'o' }));
      await b.store.transact((tx) => tx.schedule('theirs/1', theirs, { type: 't', aggregateId: 't' }));
      await waitFor('the other instance’s commit', () =>
        changes.some((c) => c.remote && c.earliest?.getTime() === theirs.getTime()),
      );
      // Notifications arrive in commit order: the own commit came first and was not echoed back.
      expect(changes.filter((c) => c.earliest?.getTime() === own.getTime())).toEqual([
        { remote: false, earliest: own },
      ]);

      const reported = (channel: string) => changes.filter((c) => c.remote && c.channel === channel).length;
      expect(reported('live')).toBe(1); // on starting to listen
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      await waitFor('the channel reported live again after reconnecting', () => reported('live') === 2);
      expect(reported('lost')).toBe(1);
      const newPids = await listenerPids(applicationName);
      expect(newPids).toHaveLength(1);
      expect(newPids[0]).not.toBe(pid);
      const later = new Date(Date.now() + 333_000);
      await b.store.transact((tx) => tx.schedule('theirs/2', later, { type: 't', aggregateId: 't' }));
      await waitFor('notifications to flow again', () =>
        changes.some((c) => c.remote && c.earliest?.getTime() === later.getTime()),
      );

      unwatch();
      await waitFor(
        'the LISTEN connection to close',
        async () => (await listenerPids(applicationName)).length === 0,
      );
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('notifies only on commit: a rolled-back put is never announced', async () => {
    const namespace = freshNamespace();
    const a = await open(namespace);
    const b = await open(namespace);
    try {
      const changes: StoreChange[] = [];
      a.store.onChange((change) => changes.push(change));
      await waitFor('the LISTEN connection', async () => {
        // A commit that must arrive proves the listener is up.
        await b.store.transact((tx) =>
          tx.schedule('probe', new Date(Date.now() + 1e9), { type: 't', aggregateId: 'p' }),
        );
        return changes.some((c) => c.remote);
      });
      const rolledBack = new Date(Date.now() + 444_000);
      const committed = new Date(Date.now() + 555_000);
      await b.store
        .transact(async (tx) => {
          await tx.schedule('never', rolledBack, { type: 't', aggregateId: 'n' });
          await tx.loadSchedule('never'); // the put reaches the server inside the transaction
          throw new Error('roll back');
        })
        .catch(() => {});
      await b.store.transact((tx) => tx.schedule('yes', committed, { type: 't', aggregateId: 'y' }));
      await waitFor('the committed put', () =>
        changes.some((c) => c.earliest?.getTime() === committed.getTime()),
      );
      expect(changes.some((c) => c.earliest?.getTime() === rolledBack.getTime())).toBe(false);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
