import { InvalidArgumentError, type Logger } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { encodeCommit, encodeWrites } from '../src/commit.js';
import { createRedisBackend } from '../src/index.js';
import { ScriptRunner } from '../src/scripts.js';
import { message, redisFixture, redisUrl } from './helpers.js';

// `waitForReplicas` on a single server (no replicas): its validation, its warning, and what a write that
// no replica confirms does. On a cluster with replicas: test/cluster.test.ts.
const fx = redisFixture();

function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const push = (level: string) => (m: string) => lines.push(`${level}: ${m}`);
  return { lines, debug: push('debug'), info: push('info'), warn: push('warn'), error: push('error') };
}

describe('waitForReplicas', () => {
  it.each([
    [0, 'options.waitForReplicas'],
    [1.5, 'options.waitForReplicas'],
    [-1, 'options.waitForReplicas'],
    ['1', 'options.waitForReplicas'],
    [null, 'options.waitForReplicas'],
    [{ replicas: 0 }, 'options.waitForReplicas.replicas'],
    [{ replicas: 1, timeoutMs: 0 }, 'options.waitForReplicas.timeoutMs'],
    [{ replicas: 1, timeoutMs: Number.NaN }, 'options.waitForReplicas.timeoutMs'],
    [{ replicas: 1, timeoutMs: 2 ** 40 }, 'options.waitForReplicas.timeoutMs'],
  ])('rejects %j naming %s', async (waitForReplicas, field) => {
    const error = await createRedisBackend(
      { url: redisUrl },
      // @ts-expect-error: wrong on purpose
      { prefix: fx.prefix(), waitForReplicas },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', field });
  });

  it('warns at startup when the server has fewer replicas, and then fails replicated writes transiently, applied but unconfirmed', async () => {
    const logger = recordingLogger();
    const prefix = fx.prefix();
    const backend = await fx.open(prefix, {
      logger,
      waitForReplicas: { replicas: 1, timeoutMs: 50 },
      commitTimeoutMs: 0,
    });
    expect(logger.lines).toContain(
      'warn: redis has fewer replicas than waitForReplicas asks for: replicated writes will fail until more connect',
    );
    const error = await backend.store
      .transact((tx) => tx.schedule('unconfirmed', new Date(Date.now() + 60_000), message('u')))
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'DUETIME_BACKEND', transient: true });
    expect(String(error)).toMatch(/confirmed by 0 of 1 replicas within 50 ms/);
    // Applied on the primary: a failover could lose it, a read here sees it.
    expect((await backend.store.loadSchedule('unconfirmed'))?.version).toBe(1);
    await expect(backend.leases.acquire('lease', 'me', 10_000)).rejects.toMatchObject({ transient: true });
    await expect(backend.cursors.advance('cursor', new Date(), 10_000)).rejects.toMatchObject({
      transient: true,
    });
    // Reads and the scripts that only steer deliveries do not wait.
    expect(await backend.leases.holder('lease')).toMatchObject({ owner: 'me' });
    expect(await backend.store.nextDueAt()).toBeInstanceOf(Date);
  });

  it('keeps a resent commit writing (the marker’s expiry), so a WAIT after it covers the first run', async () => {
    const prefix = fx.prefix();
    const { store } = await fx.open(prefix);
    const k = fx.keys(prefix);
    const runner = new ScriptRunner(fx.admin);
    // The script call a commit sends, with the marker's time to live it is sent with.
    const call = (markerTtl: number) =>
      encodeCommit({ keys: k, markerTtl, senderId: 'test' }, 'resent', { token: '', claimed: [] }, (list) => [
        encodeWrites([{ op: 'put', key: 'resent/1', at: new Date(), message: message('r') }], list),
      ]);
    const send = (markerTtl: number) => {
      const { keys, args } = call(markerTtl);
      return runner.run('commit', keys, args);
    };
    expect(await send(60_000)).toEqual(['ok']);
    expect(await fx.admin.pttl(k.marker('resent'))).toBeLessThanOrEqual(60_000);
    expect(await send(600_000)).toEqual(['duplicate']);
    expect(await fx.admin.pttl(k.marker('resent'))).toBeGreaterThan(60_000);
    expect((await store.loadSchedule('resent/1'))?.version).toBe(1);
  });
});
