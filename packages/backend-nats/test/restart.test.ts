import { freshNamespace, waitFor } from '@duetime/conformance';
import { aggregate, Dispatcher, isTransient, type Logger } from '@duetime/core';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { createNatsBackend, type NatsBackend } from '../src/index.js';

const effects = aggregate({ type: 'restart-effects', initial: 0, apply: { applied: (n: number) => n + 1 } });

function quietLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error: (m) => warnings.push(m) };
}

describe('a NATS server that crashes and restarts', () => {
  let server: PrivateNatsServer | undefined;
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
    await server?.dispose();
    server = undefined;
  });

  it('keeps the dispatcher running; nothing committed before, during or after is lost or applied twice', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    const logger = quietLogger();
    const backend: NatsBackend = await createNatsBackend(
      { servers: server.url },
      { prefix: freshNamespace(), logger, commitTimeoutMs: 30_000, requestTimeoutMs: 2000 },
    );
    cleanups.push(() => backend.close());
    const { store } = backend;
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store,
      logger,
      rescanInterval: 200,
      retryDelay: 100,
      concurrency: 4,
      processor: async (tx, message, { schedule }) => {
        await tx.exec(effects, message.aggregateId ?? schedule.key, (_s, ag) =>
          ag.raise('applied', { key: schedule.key }),
        );
        delivered.push(schedule.key);
      },
    });
    const controller = new AbortController();
    const running = dispatcher.run(controller.signal);
    cleanups.push(async () => {
      controller.abort();
      await running;
    });

    const lease = await backend.leases.acquire('restart/lease', 'me', 120_000);
    expect(lease).toBeDefined();
    const now = Date.now();
    await store.transact(async (tx) => {
      for (let i = 0; i < 30; i++)
        await tx.schedule(`before/${i}`, new Date(now + i * 100), {
          type: 'effect',
          aggregateId: `before-${i % 5}`,
        });
    });
    await waitFor('some deliveries before the crash', () => delivered.length >= 3);

    await server.kill();
    // A commit issued while the server is down waits (retrying under the same message id) and lands once.
    const during = store.transact((tx) =>
      tx.schedule('during/1', new Date(Date.now() + 100), { type: 'effect', aggregateId: 'during' }),
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await server.restart();
    await during;
    expect((await store.loadSchedule('during/1'))?.key).toBe('during/1');

    await store.transact((tx) =>
      tx.schedule('after/1', new Date(Date.now() + 100), { type: 'effect', aggregateId: 'after' }),
    );
    await waitFor('every schedule to be consumed', async () => (await store.listSchedules()).length === 0, {
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    expect(dispatcher.snapshot().running).toBe(true);

    const applied: string[] = [];
    for (const id of ['before-0', 'before-1', 'before-2', 'before-3', 'before-4', 'during', 'after'])
      for (const e of await store.loadEvents(id)) applied.push((e.data as { key: string }).key);
    const expected = [...Array.from({ length: 30 }, (_, i) => `before/${i}`), 'during/1', 'after/1'];
    expect(applied.sort()).toEqual(expected.sort());
    expect((await backend.leases.holder('restart/lease'))?.token).toBe(lease?.token);
    // The outage was noticed (scans failed and were retried), not hidden.
    expect(logger.warnings.some((w) => /dispatcher scan failed|could not record|disconnected/.test(w))).toBe(
      true,
    );
  }, 120_000);

  it('reports operations during the outage as transient errors, and works again after the restart', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    const backend = await createNatsBackend(
      { servers: server.url },
      { prefix: freshNamespace(), commitTimeoutMs: 1000, requestTimeoutMs: 500 },
    );
    cleanups.push(() => backend.close());
    await backend.store.transact((tx) => tx.schedule('k', new Date(), { type: 't', aggregateId: 'a' }));
    await server.kill();
    const failure = await backend.store.loadSchedule('k').then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isTransient(failure)).toBe(true);
    expect(String((failure as Error).message)).toContain(`127.0.0.1:${server.port}`);
    const leaseFailure = await backend.leases.acquire('l', 'me', 1000).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isTransient(leaseFailure)).toBe(true);
    await server.restart();
    await waitFor('the backend to answer again', async () =>
      backend.store.loadSchedule('k').then(
        (s) => s?.key === 'k',
        () => false,
      ),
    );
    expect(await backend.leases.acquire('l', 'me', 1000)).toBeDefined();
  }, 60_000);
});
