import { waitFor } from '@duetime/conformance';
import * as own from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
// The application's copy of the API: an older minor version than the one @duetime/core resolves (1.9),
// whose registrations that copy refuses to read.
import * as app from 'opentelemetry-api-1-3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryBackend, Dispatcher, every, ManualClock, Registry, Scheduler } from '../../src/index.js';
import { memorySdk, total, traceparent, warningLogger } from './otel-sdk.js';

const sdk = memorySdk();
beforeAll(() => {
  // What an application's SDK set-up does, through the application's own copy of the API.
  app.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  app.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  app.trace.setGlobalTracerProvider(sdk.tracerProvider);
  app.metrics.setGlobalMeterProvider(sdk.meterProvider);
});
afterAll(() => {
  app.context.disable();
  app.propagation.disable();
  app.trace.disable();
  app.metrics.disable();
});

describe('OpenTelemetry with two copies of the API: the application’s 1.3 registered globally, duetime’s 1.9', () => {
  it('uses what the application registered: trace context recorded, delivery linked, processor spans parented, metrics', async () => {
    // The premise: duetime's own copy cannot see the application's registrations.
    expect(own.propagation.fields()).toEqual([]);
    expect(app.propagation.fields()).toEqual(['traceparent', 'tracestate']);
    expect(own.trace.getTracerProvider()).not.toBe(app.trace.getTracerProvider());

    const logger = warningLogger();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    const tracer = app.trace.getTracer('app');
    const placed = tracer.startSpan('place order', undefined, app.context.active());
    await app.context.with(app.trace.setSpan(app.context.active(), placed), () =>
      store.transact((tx) => tx.schedule('order/1/expire', new Date(clock.now()), { type: 'order.expire' })),
    );
    placed.end();
    expect((await store.loadSchedule('order/1/expire'))?.message.trace).toEqual({
      traceparent: traceparent(placed.spanContext()),
    });

    // No telemetry option: the dispatcher finds the application's providers in the global registry.
    const dispatcher = new Dispatcher({
      store,
      logger,
      processor: async () => {
        tracer.startSpan('send email', undefined, app.context.active()).end();
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the delivery span', () => sdk.finished('process order.expire'));
    ac.abort();
    await done;
    const process = sdk.finished('process order.expire');
    expect(process?.links.map((l) => l.context.spanId)).toEqual([placed.spanContext().spanId]);
    expect(sdk.finished('send email')?.parentSpanContext?.spanId).toBe(process?.spanContext().spanId);
    expect(total((await sdk.metrics()).get('duetime.deliveries'))).toBe(1);
    expect(logger.warnings).toEqual([]);
  });

  it('a scheduler without a telemetry option runs its handlers inside spans of the registered provider', async () => {
    const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 59, 500));
    const backend = createMemoryBackend({ clock });
    const scheduler = new Scheduler({
      registry: new Registry(
        every('report', 1000, async () => {
          app.trace.getTracer('app').startSpan('render', undefined, app.context.active()).end();
        }),
      ),
      backend,
      clock,
      logger: warningLogger(),
    });
    const done = scheduler.run();
    await waitFor('leadership', () => scheduler.snapshot().leader);
    await clock.advance(1000);
    await waitFor('the run span', () => sdk.finished('run report'));
    await scheduler.drain();
    await done;
    expect(sdk.finished('render')?.parentSpanContext?.spanId).toBe(
      sdk.finished('run report')?.spanContext().spanId,
    );
  });
});
