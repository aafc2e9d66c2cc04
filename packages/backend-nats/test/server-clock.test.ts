import { freshNamespace } from '@duetime/conformance';
import { silentLogger } from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { ServerClock } from '../src/server-clock.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';
import { closeStoreAdapters, storeAdapterOn } from './store-adapter.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The server's clock as a lower bound: a delivery asks for it on every claim, so the probe that refreshes
 * it (a publish the server stores, then a read) must not make a claim wait.
 */
describe('ServerClock', () => {
  let nc: NatsConnection;
  let io: NatsIo;
  let where: ReturnType<typeof layout>;
  let namespace: string;

  beforeAll(async () => {
    namespace = freshNamespace();
    // A backend creates the streams the probe writes to.
    await openOn(NATS_STORE_URL, namespace);
    nc = await connectNats(NATS_STORE_URL);
    io = await NatsIo.open(nc, 10_000);
    where = layout(namespace);
  });
  afterAll(async () => {
    await closeStoreAdapters();
    await nc?.close();
    await deleteOpened();
  });

  interface Probed {
    io: NatsIo;
    /** Probes begun (their writes) and read back. */
    probes: number;
    reads: number;
    /** Holds the probes' writes back while set. */
    hold?: Promise<void>;
    /** Fails the probes' writes while set. */
    fail?: Error;
    /** Delays the probes' reads by this many ms while set. */
    slowRead?: number;
  }

  /** The I/O of `io` with its probes counted, held back or failed at will. */
  function counted(): Probed {
    const state: Probed = {
      probes: 0,
      reads: 0,
      io: new Proxy(io, {
        get(target, name) {
          if (name === 'publish')
            return async (...args: Parameters<NatsIo['publish']>) => {
              state.probes++;
              if (state.hold) await state.hold;
              if (state.fail) throw state.fail;
              return target.publish(...args);
            };
          if (name === 'last')
            return async (...args: Parameters<NatsIo['last']>) => {
              const m = await target.last(...args);
              if (state.slowRead) await sleep(state.slowRead);
              state.reads++;
              return m;
            };
          const value = Reflect.get(target, name, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      }),
    };
    return state;
  }

  it('stays at or below the timestamps the server gives writes that follow', async () => {
    const clock = new ServerClock(io, where);
    for (let i = 0; i < 5; i++) {
      const reading = await clock.now();
      await io.publish(where.clock, '');
      const stored = await io.last(where.leaseStream, where.clock);
      expect(stored?.time).toBeGreaterThanOrEqual(Math.floor(reading));
    }
  });

  it('keeps an upper bound at or above the server time when its probe comes back late, so a delivery on the server clock takes fires (it reads no records)', async () => {
    const probed = counted();
    const late = 2_500;
    probed.slowRead = late;
    const clock = new ServerClock(probed.io, where);
    const lower = await clock.now();
    const upper = await clock.latest();
    // The probe's answer took 2.5 s to come back: the lower bound lags this (same) machine's clock by as
    // much, which a check against it would read as a clock 2.5 s ahead of the server.
    expect(Date.now() - lower).toBeGreaterThanOrEqual(late - 50);
    expect(upper - lower).toBeGreaterThanOrEqual(late);
    // The upper bound is at or above the timestamp of a write the server stored before it was read.
    await io.publish(where.clock, '');
    const stored = await io.last(where.leaseStream, where.clock);
    expect(await clock.latest()).toBeGreaterThanOrEqual(stored!.time);

    const warned: string[] = [];
    const logger = { ...silentLogger, warn: (message: string) => void warned.push(message) };
    /** Whether a delivery at this machine's time judged its clock ahead of the server's. */
    const ahead = async (serverLatest: () => Promise<number>) => {
      const { adapter } = await storeAdapterOn(namespace, { serverLatest, logger });
      await adapter.rollback(await adapter.begin({ now: new Date(), limit: 10 }));
      await adapter.close();
      return warned.splice(0).some((w) => w.includes('ahead of the NATS server'));
    };
    // Judged against the lower bound (as the store did), the late probe makes this machine's clock look
    // ahead and the delivery reads the records; against the upper bound it does not.
    expect(await ahead(() => clock.now())).toBe(true);
    expect(await ahead(() => clock.latest())).toBe(false);
    expect(probed.probes).toBe(1);
  }, 20_000);

  it('answers from its last reading while the probe that refreshes it is under way', async () => {
    const probed = counted();
    const clock = new ServerClock(probed.io, where, 20, 60_000);
    const first = await clock.now();
    expect(probed.probes).toBe(1);
    let release = () => {};
    probed.hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    // A timer may fire up to a millisecond before its time by the monotonic clock: the wait is measured.
    const asleep = performance.now();
    await sleep(30);
    const slept = performance.now() - asleep;
    // Older than the refresh interval: a probe starts and hangs, yet the reading answers.
    const second = await clock.now();
    expect(probed.probes).toBe(2);
    expect(second).toBeGreaterThanOrEqual(first + slept);
    // One probe at a time.
    await clock.now();
    expect(probed.probes).toBe(2);
    expect(probed.reads).toBe(1);
    probed.hold = undefined;
    release();
    // The probe lands and its reading replaces the first: still below what the server stores next.
    await expect.poll(() => probed.reads, { timeout: 10_000 }).toBe(2);
    const reading = await clock.now();
    await io.publish(where.clock, '');
    const stored = await io.last(where.leaseStream, where.clock);
    expect(stored?.time).toBeGreaterThanOrEqual(Math.floor(reading));
  });

  it('waits for a probe, and fails with it, once its reading is older than it may be', async () => {
    const probed = counted();
    const clock = new ServerClock(probed.io, where, 10, 40);
    await clock.now();
    probed.fail = new Error('server gone');
    await sleep(20);
    // Stale for a refresh, not yet too old: answers, the failed probe behind it goes unseen.
    await expect(clock.now()).resolves.toBeGreaterThan(0);
    await sleep(50);
    await expect(clock.now()).rejects.toThrow(/server gone/);
    probed.fail = undefined;
    await expect(clock.now()).resolves.toBeGreaterThan(0);
  });
});
