import { waitFor } from '@duetime/conformance';
import * as api from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { afterEach, describe, expect, it } from 'vitest';
import { configureTelemetry, createMemoryBackend, Dispatcher, ManualClock } from '../../src/index.js';
import { resetOpenTelemetryLoader } from '../../src/telemetry/loader.js';
import { memorySdk, traceparent, warningLogger } from './otel-sdk.js';

const REGISTRY = Symbol.for('opentelemetry.js.api.1');

afterEach(() => {
  api.context.disable();
  api.propagation.disable();
  api.trace.disable();
  configureTelemetry(undefined);
  resetOpenTelemetryLoader();
});

/** Delivers everything due with `dispatcher`, then stops it. */
async function deliver(
  dispatcher: { run(signal: AbortSignal): Promise<void> },
  until: () => boolean,
): Promise<void> {
  const ac = new AbortController();
  const done = dispatcher.run(ac.signal);
  await waitFor('the deliveries', until);
  ac.abort();
  await done;
}

describe('OpenTelemetry registrations duetime cannot use', () => {
  it('says once, at warn level, that it cannot import the API the application registered with; telemetry.api fixes it', async () => {
    // The application registered globally, but @duetime/core's import of @opentelemetry/api fails (the
    // peer is not resolvable from where core is installed).
    resetOpenTelemetryLoader(() => Promise.reject(new Error('Cannot find package @opentelemetry/api')));
    const contextManager = new AsyncLocalStorageContextManager().enable();
    api.context.setGlobalContextManager(contextManager);
    api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const sdk = memorySdk();
    api.trace.setGlobalTracerProvider(sdk.tracerProvider);
    const logger = warningLogger();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    let delivered = 0;
    const dispatcher = new Dispatcher({ store, logger, processor: async () => void delivered++ });
    const span = api.trace.getTracer('app').startSpan('place order');
    await api.context.with(api.trace.setSpan(api.context.active(), span), async () => {
      for (let i = 0; i < 3; i++)
        await store.transact((tx) => tx.schedule(`k/${i}`, new Date(clock.now()), { type: 't' }));
    });
    await deliver(dispatcher, () => delivered === 3);
    expect((await store.loadSchedule('k/0'))?.message.trace).toBeUndefined();
    expect(sdk.spans.getFinishedSpans()).toEqual([]);
    const said = logger.warnings.filter((w) => w.includes('cannot import @opentelemetry/api'));
    expect(said).toHaveLength(1);
    expect(said[0]).toContain('telemetry: { api }');

    // Given the API explicitly, everything works again, and nothing more is said.
    configureTelemetry({ api });
    await api.context.with(api.trace.setSpan(api.context.active(), span), () =>
      store.transact((tx) => tx.schedule('k/3', new Date(clock.now()), { type: 't' })),
    );
    span.end();
    expect((await store.loadSchedule('k/3'))?.message.trace).toEqual({
      traceparent: traceparent(span.spanContext()),
    });
    const explicit = new Dispatcher({
      store,
      logger,
      telemetry: { api },
      processor: async () => void delivered++,
    });
    await deliver(explicit, () => sdk.spans.getFinishedSpans().some((s) => s.name === 'process t'));
    const process = sdk.spans.getFinishedSpans().find((s) => s.name === 'process t');
    expect(process?.links.map((l) => l.context.spanId)).toEqual([span.spanContext().spanId]);
    expect(logger.warnings.filter((w) => w.includes('cannot import'))).toHaveLength(1);
  });

  it('says once that a registered part lacks what duetime calls, goes without it, and names the option that replaces it', async () => {
    const sdk = memorySdk();
    api.trace.setGlobalTracerProvider(sdk.tracerProvider);
    // Something registered a propagation part that is not a propagator.
    const registry = (globalThis as Record<symbol, Record<string, unknown>>)[REGISTRY];
    expect(registry).toBeDefined();
    (registry as Record<string, unknown>).propagation = { inject: 'no' };
    const logger = warningLogger();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    await store.transact(async (tx) => {
      await tx.schedule('a', new Date(clock.now()), {
        type: 't',
        trace: { traceparent: traceparent({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) }) },
      });
      await tx.schedule('b', new Date(clock.now()), { type: 't' });
    });
    const dispatcher = new Dispatcher({ store, logger, processor: async () => {} });
    await deliver(dispatcher, () => sdk.spans.getFinishedSpans().length === 2);
    // The deliveries are traced; without a propagator the stored trace context cannot be read back.
    expect(sdk.spans.getFinishedSpans().every((s) => s.links.length === 0)).toBe(true);
    const said = logger.warnings.filter((w) => w.includes('propagation registered globally'));
    expect(said).toHaveLength(1);
    expect(said[0]).toContain('telemetry.propagator');
    delete (registry as Record<string, unknown>).propagation;
  });
});
