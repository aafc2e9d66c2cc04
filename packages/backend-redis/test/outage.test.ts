import { aggregate, BackendError, Dispatcher, type Logger } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { duetimeClientIds, message, redisFixture, waitFor } from './helpers.js';

const fx = redisFixture();

const effects = aggregate({
  type: 'outage-effects',
  initial: 0,
  apply: { 'effect.applied': (count: number) => count + 1 },
});

function countingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn: (m) => warnings.push(m),
    error: (m) => warnings.push(m),
  };
}

describe('lost connections', () => {
  it('keeps dispatching, scheduling and leasing through killed connections and a paused server; every schedule ends pending or consumed with its effect once', async () => {
    const prefix = fx.prefix();
    const logger = countingLogger();
    const dispatching = await fx.open(prefix, { logger });
    const scheduling = await fx.open(prefix, { logger });
    const leasing = await fx.open(prefix, { logger });

    const dispatcher = new Dispatcher({
      store: dispatching.store,
      concurrency: 4,
      rescanInterval: 200,
      retryDelay: 20,
      logger,
      processor: async (tx, m, { schedule }) => {
        await tx.exec(effects, `effect/${schedule.key}`, (_s, ag) =>
          ag.raise('effect.applied', { v: schedule.version }),
        );
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
        void m;
      },
    });
    const controller = new AbortController();
    const dispatched = dispatcher.run(controller.signal);

    let disturbing = true;
    const committed: string[] = [];
    const unconfirmed: string[] = [];
    const scheduler = (async () => {
      for (let i = 0; disturbing || i < 20; i++) {
        const key = `out/${i}`;
        // Every tenth schedule is for much later: it must still be pending afterwards, untouched.
        const at = i % 10 === 9 ? Date.now() + 3_600_000 : Date.now() - 1;
        try {
          await scheduling.store.transact((tx) => tx.schedule(key, new Date(at), message(key, { i })));
          committed.push(key);
        } catch (error) {
          expect(error).toBeInstanceOf(BackendError);
          unconfirmed.push(key);
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();

    const tokens: number[] = [];
    let leaseErrors = 0;
    const leaser = (async () => {
      let token: number | undefined;
      while (disturbing) {
        try {
          const grant =
            token === undefined
              ? await leasing.leases.acquire('outage/leader', 'only-owner', 2000)
              : await leasing.leases.renew('outage/leader', 'only-owner', token, 2000);
          // Nobody else contends: an answer of "held by someone else" would be an error misreported.
          expect(grant).toBeDefined();
          token = grant!.token;
          tokens.push(token);
        } catch (error) {
          expect(error).toBeInstanceOf(BackendError);
          leaseErrors++;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();

    let kills = 0;
    for (let round = 0; round < 12; round++) {
      await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 100));
      if (round === 6) await fx.admin.client('PAUSE', 400, 'WRITE');
      for (const id of await duetimeClientIds(fx.admin, prefix)) {
        await fx.admin.client('KILL', 'ID', id).catch(() => 0);
        kills++;
      }
    }
    disturbing = false;
    await Promise.all([scheduler, leaser]);

    expect(kills).toBeGreaterThanOrEqual(12);
    expect(committed.length).toBeGreaterThan(20);
    const later = committed.filter((k) => Number(k.slice(4)) % 10 === 9);
    await waitFor(
      'every due schedule to be consumed',
      async () => (await scheduling.store.listSchedules()).length === later.length,
      60_000,
    );
    controller.abort();
    await dispatched;

    for (const key of [...committed, ...unconfirmed]) {
      const count = (await scheduling.store.loadEvents(`effect/${key}`)).length;
      const pending = await scheduling.store.loadSchedule(key);
      if (later.includes(key)) {
        expect(pending?.version, key).toBeGreaterThan(0);
        expect(count, key).toBe(0);
      } else if (committed.includes(key)) {
        expect(pending, key).toBeUndefined();
        expect(count, `effects of ${key}`).toBe(1);
      } else {
        // Not confirmed to its caller: applied once (and then delivered once, or still pending) or not at all.
        expect(count, `effects of ${key}`).toBeLessThanOrEqual(1);
      }
    }
    // Every delivery the dispatcher counted committed exactly one effect, and no effect exists without one.
    let effectsTotal = 0;
    for (const key of [...committed, ...unconfirmed])
      effectsTotal += (await scheduling.store.loadEvents(`effect/${key}`)).length;
    expect(dispatcher.snapshot().delivered).toBe(effectsTotal);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThanOrEqual(tokens[i - 1]!);
    expect(tokens.length).toBeGreaterThan(leaseErrors);
    // After the outage everything answers again.
    expect(await leasing.leases.acquire('outage/after', 'me', 1000)).toBeDefined();
  }, 120_000);
});
