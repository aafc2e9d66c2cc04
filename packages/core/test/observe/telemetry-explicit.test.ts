import { waitFor } from '@duetime/conformance';
import * as api from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  configureTelemetry,
  createMemoryBackend,
  Dispatcher,
  every,
  InvalidArgumentError,
  ManualClock,
  Registry,
  Scheduler,
  silentLogger,
} from '../../src/index.js';
import { memorySdk, total, traceparent, warningLogger } from './otel-sdk.js';

// Nothing is registered globally in this file: no tracer or meter provider, no propagator, no context
// manager. The application hands duetime every part explicitly.
function explicitSetup() {
  const sdk = memorySdk();
  const contextManager = new AsyncLocalStorageContextManager().enable();
  const propagator = new W3CTraceContextPropagator();
  const telemetry = {
    api,
    tracerProvider: sdk.tracerProvider,
    meterProvider: sdk.meterProvider,
    propagator,
    contextManager,
  };
  return { ...sdk, contextManager, telemetry, tracer: sdk.tracerProvider.getTracer('app') };
}

afterEach(() => configureTelemetry(undefined));

describe('OpenTelemetry on the application’s own providers, nothing registered globally', () => {
  it('records the scheduling span in tx.schedule, links the delivery to it, and parents the processor’s spans', async () => {
    expect(
      (globalThis as Record<symbol, unknown>)[Symbol.for('opentelemetry.js.api.1')],
      'nothing is registered globally',
    ).toBeUndefined();
    const { telemetry, contextManager, tracer, finished, metrics } = explicitSetup();
    const logger = warningLogger();
    configureTelemetry(telemetry, logger);
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    const placed = tracer.startSpan('place order');
    await contextManager.with(api.trace.setSpan(api.ROOT_CONTEXT, placed), () =>
      store.transact((tx) => tx.schedule('order/1/expire', new Date(clock.now()), { type: 'order.expire' })),
    );
    placed.end();
    expect((await store.loadSchedule('order/1/expire'))?.message.trace).toEqual({
      traceparent: traceparent(placed.spanContext()),
    });

    let inner: api.SpanContext | undefined;
    const dispatcher = new Dispatcher({
      store,
      logger,
      telemetry,
      processor: async () => {
        const child = tracer.startSpan('send email', undefined, contextManager.active());
        inner = child.spanContext();
        child.end();
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the delivery span', () => finished('process order.expire'));
    ac.abort();
    await done;
    const process = finished('process order.expire');
    expect(process?.links.map((l) => l.context.spanId)).toEqual([placed.spanContext().spanId]);
    expect(process?.links[0]?.context.traceId).toBe(placed.spanContext().traceId);
    expect(finished('send email')?.parentSpanContext?.spanId).toBe(process?.spanContext().spanId);
    expect(inner?.traceId).toBe(process?.spanContext().traceId);
    expect(total((await metrics()).get('duetime.deliveries'))).toBe(1);
    expect(logger.warnings).toEqual([]);
  });

  it('a dispatcher’s own telemetry serves its processors’ tx.schedule: the next delivery links to the one that scheduled it', async () => {
    const { telemetry, finished } = explicitSetup();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    // Scheduled outside any span and without configureTelemetry: only the dispatcher knows the setup.
    await store.transact((tx) => tx.schedule('step/1', new Date(clock.now()), { type: 'step.one' }));
    expect((await store.loadSchedule('step/1'))?.message.trace).toBeUndefined();
    const dispatcher = new Dispatcher({
      store,
      logger: silentLogger,
      telemetry,
      processor: async (tx, message) => {
        if (message.type === 'step.one')
          await tx.schedule('step/2', new Date(clock.now()), { type: 'step.two' });
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the second delivery', () => finished('process step.two'));
    ac.abort();
    await done;
    const first = finished('process step.one');
    const second = finished('process step.two');
    expect(first?.links).toEqual([]);
    expect(second?.links.map((l) => l.context.spanId)).toEqual([first?.spanContext().spanId]);
  });

  it('a scheduler’s own telemetry parents its handlers’ spans through the given context manager', async () => {
    const { telemetry, contextManager, tracer, finished } = explicitSetup();
    const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 59, 500));
    const backend = createMemoryBackend({ clock });
    const scheduler = new Scheduler({
      registry: new Registry(
        every('report', 1000, async () => {
          tracer.startSpan('render', undefined, contextManager.active()).end();
        }),
      ),
      backend,
      clock,
      logger: silentLogger,
      telemetry,
    });
    const done = scheduler.run();
    await waitFor('leadership', () => scheduler.snapshot().leader);
    await clock.advance(1000);
    await waitFor('the run span', () => finished('run report'));
    await scheduler.drain();
    await done;
    expect(finished('render')?.parentSpanContext?.spanId).toBe(finished('run report')?.spanContext().spanId);
  });

  it('refuses a part that does not fit, naming its field', () => {
    const bad: [unknown, string][] = [
      [{ propagator: {} }, 'options.telemetry.propagator'],
      [{ contextManager: { active() {} } }, 'options.telemetry.contextManager'],
      [{ tracerProvider: 5 }, 'options.telemetry.tracerProvider'],
      [{ meterProvider: {} }, 'options.telemetry.meterProvider'],
      [{ api: { trace: {} } }, 'options.telemetry.api'],
      [{ countLimit: -1 }, 'options.telemetry.countLimit'],
      ['on', 'options.telemetry'],
    ];
    const { store } = createMemoryBackend();
    for (const [telemetry, field] of bad) {
      const error = (() => {
        try {
          new Dispatcher({ store, processor: async () => {}, telemetry: telemetry as never });
        } catch (e) {
          return e;
        }
      })();
      expect(error, JSON.stringify(telemetry)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
    expect(() => configureTelemetry({ propagator: {} } as never)).toThrow(InvalidArgumentError);
  });
});
