import { waitFor } from '@duetime/conformance';
import * as api from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  type MetricData,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createMemoryBackend,
  Dispatcher,
  every,
  InvalidArgumentError,
  ManualClock,
  type Message,
  Registry,
  Scheduler,
  silentLogger,
} from '../../src/index.js';

// The application's SDK: a W3C propagator and an async-hooks context manager registered globally (what
// the scheduling side needs), spans and metrics kept in memory.
const contextManager = new AsyncLocalStorageContextManager().enable();
beforeAll(() => {
  api.context.setGlobalContextManager(contextManager);
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(() => {
  api.context.disable();
  api.propagation.disable();
});

function sdk() {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const metrics = async (): Promise<Map<string, MetricData>> => {
    await reader.forceFlush();
    const all = new Map<string, MetricData>();
    for (const resource of exporter.getMetrics())
      for (const scope of resource.scopeMetrics)
        for (const metric of scope.metrics) all.set(metric.descriptor.name, metric);
    exporter.reset();
    return all;
  };
  return { spans, tracerProvider, meterProvider, metrics };
}

function sumBy(metric: MetricData | undefined, attribute: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const point of metric?.dataPoints ?? []) {
    const key = String(point.attributes[attribute]);
    out[key] = (out[key] ?? 0) + (point.value as number);
  }
  return out;
}

describe('OpenTelemetry', () => {
  it('carries the scheduling span in the message and links the delivery span to it; the processor runs inside it', async () => {
    const { spans, tracerProvider, meterProvider, metrics } = sdk();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    const tracer = tracerProvider.getTracer('app');
    let placed: api.SpanContext | undefined;
    await tracer.startActiveSpan('place order', async (span) => {
      placed = span.spanContext();
      await store.transact((tx) =>
        tx.schedule('order/1/expire', new Date(clock.now() + 5000), {
          type: 'order.expire',
          data: { id: 1 },
        }),
      );
      span.end();
    });
    const stored = await store.loadSchedule('order/1/expire');
    expect(stored?.message.trace?.traceparent).toBe(`00-${placed?.traceId}-${placed?.spanId}-01`);
    expect(stored?.message.data).toEqual({ id: 1 });

    const seen: Message[] = [];
    let inner: api.SpanContext | undefined;
    const dispatcher = new Dispatcher({
      store,
      logger: silentLogger,
      telemetry: { api, tracerProvider, meterProvider },
      processor: async (_tx, message) => {
        seen.push(message);
        const child = tracer.startSpan('send email');
        inner = child.spanContext();
        child.end();
      },
    });
    // The dispatcher starts 250 ms after the deadline: the delivery is that late.
    await clock.advance(5250);
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('the delivery span', () =>
      spans.getFinishedSpans().find((s) => s.name === 'process order.expire'),
    );
    ac.abort();
    await done;

    expect(seen).toEqual([{ type: 'order.expire', data: { id: 1 } }]);
    const process = spans.getFinishedSpans().find((s) => s.name === 'process order.expire');
    const child = spans.getFinishedSpans().find((s) => s.name === 'send email');
    expect(process?.kind).toBe(api.SpanKind.CONSUMER);
    expect(process?.links.map((l) => l.context.spanId)).toEqual([placed?.spanId]);
    expect(process?.links[0]?.context.traceId).toBe(placed?.traceId);
    expect(child?.parentSpanContext?.spanId).toBe(process?.spanContext().spanId);
    expect(inner?.traceId).toBe(process?.spanContext().traceId);
    expect(process?.attributes).toMatchObject({
      'messaging.system': 'duetime',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'order.expire',
      'duetime.schedule.key': 'order/1/expire',
      'duetime.schedule.version': stored?.version,
      'duetime.delivery.attempt': 1,
      'duetime.delivery.lateness_ms': 250,
      'duetime.backend': 'memory',
      'duetime.delivery.outcome': 'delivered',
    });
    expect(process?.status.code).toBe(api.SpanStatusCode.UNSET);

    const m = await metrics();
    expect(sumBy(m.get('duetime.deliveries'), 'duetime.delivery.outcome')).toEqual({ delivered: 1 });
    const lateness = m.get('duetime.delivery.lateness');
    expect(lateness?.dataPointType).toBe(DataPointType.HISTOGRAM);
    const point = lateness?.dataPoints[0]?.value as { count: number; sum: number };
    expect(point.count).toBe(1);
    expect(point.sum).toBeCloseTo(0.25, 5);
  });

  it('records errors on failed and dead-lettered deliveries, counts outcomes, and measures pending and due', async () => {
    const { spans, tracerProvider, meterProvider, metrics } = sdk();
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    const now = new Date(clock.now());
    await store.transact(async (tx) => {
      await tx.schedule('a', now, { type: 'fails' });
      await tx.schedule('b', now, { type: 'works' });
      await tx.schedule('later', new Date(clock.now() + 3_600_000), { type: 'works' });
    });
    const dispatcher = new Dispatcher({
      store,
      logger: silentLogger,
      retryDelay: 1000,
      maxAttempts: 2,
      telemetry: { api, tracerProvider, meterProvider },
      processor: async (_tx, message) => {
        if (message.type === 'fails') throw new TypeError('no such order');
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await waitFor('two spans', () => spans.getFinishedSpans().length >= 2);
    const before = await metrics();
    expect(sumBy(before.get('duetime.schedules.pending'), 'duetime.backend')).toEqual({ memory: 2 });
    expect(sumBy(before.get('duetime.schedules.due'), 'duetime.backend')).toEqual({ memory: 0 });
    await clock.advance(1000);
    await waitFor('three spans', () => spans.getFinishedSpans().length >= 3);
    ac.abort();
    await done;
    const failures = spans.getFinishedSpans().filter((s) => s.name === 'process fails');
    expect(failures.map((s) => s.attributes['duetime.delivery.outcome'])).toEqual([
      'failed',
      'dead_lettered',
    ]);
    expect(failures.map((s) => s.attributes['duetime.delivery.attempt'])).toEqual([1, 2]);
    for (const span of failures) {
      expect(span.status).toEqual({ code: api.SpanStatusCode.ERROR, message: 'TypeError: no such order' });
      expect(span.events.map((e) => e.name)).toContain('exception');
      expect(span.attributes['error.type']).toBe('TypeError');
    }
    expect(failures[0]?.attributes['duetime.delivery.retry_at']).toBe(
      new Date(now.getTime() + 1000).toISOString(),
    );
    const after = await metrics();
    expect(sumBy(after.get('duetime.deliveries'), 'duetime.delivery.outcome')).toEqual({
      delivered: 1,
      failed: 1,
      dead_lettered: 1,
    });
    const durations = after.get('messaging.process.duration')?.dataPoints ?? [];
    expect(durations.map((p) => (p.value as { count: number }).count).reduce((a, b) => a + b, 0)).toBe(3);
  });

  it('gives each calendar run a span with its occurrence and lateness, and reports leadership', async () => {
    const { spans, tracerProvider, meterProvider, metrics } = sdk();
    const clock = new ManualClock(Date.UTC(2026, 2, 2, 9, 59, 59, 500));
    const backend = createMemoryBackend({ clock });
    const scheduler = new Scheduler({
      registry: new Registry(
        every('report', 1000, async () => {
          tracerProvider.getTracer('app').startSpan('render').end();
        }),
        every('broken', 1000, async () => {
          throw new Error('template missing');
        }),
      ),
      backend,
      clock,
      group: 'reports',
      logger: silentLogger,
      telemetry: { api, tracerProvider, meterProvider },
    });
    const done = scheduler.run();
    await waitFor('leadership', () => scheduler.snapshot().leader);
    await clock.advance(1000);
    await waitFor(
      'two runs',
      () => spans.getFinishedSpans().filter((s) => s.name.startsWith('run ')).length >= 2,
    );
    const leading = await metrics();
    await scheduler.drain();
    await done;
    const report = spans.getFinishedSpans().find((s) => s.name === 'run report');
    const broken = spans.getFinishedSpans().find((s) => s.name === 'run broken');
    const render = spans.getFinishedSpans().find((s) => s.name === 'render');
    const record = scheduler.snapshot().history.find((r) => r.schedule === 'report');
    expect(report?.attributes).toMatchObject({
      'duetime.calendar.group': 'reports',
      'duetime.calendar.schedule': 'report',
      'duetime.occurrence.id': record?.occurrence,
      'duetime.calendar.state': 'succeeded',
      'duetime.leadership.epoch': record?.epoch,
    });
    expect(typeof report?.attributes['duetime.calendar.lateness_ms']).toBe('number');
    expect(render?.parentSpanContext?.spanId).toBe(report?.spanContext().spanId);
    expect(broken?.status.code).toBe(api.SpanStatusCode.ERROR);
    expect(broken?.attributes['duetime.calendar.reason']).toBe('handler_failed');
    expect(sumBy(leading.get('duetime.leadership'), 'duetime.calendar.group')).toEqual({ reports: 1 });
    expect(sumBy(leading.get('duetime.leadership.epoch'), 'duetime.calendar.group')).toEqual({
      reports: record?.epoch,
    });
    expect(sumBy(leading.get('duetime.calendar.runs'), 'duetime.calendar.state')).toEqual({
      succeeded: 1,
      failed: 1,
    });
    expect(sumBy(leading.get('duetime.leadership.changes'), 'duetime.leadership.change')).toEqual({
      acquired: 1,
    });
  });

  it('keeps an explicit trace, refuses a malformed one naming the field, and stores nothing without an active span', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const { store } = createMemoryBackend({ clock });
    const at = new Date(clock.now() + 1000);
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await store.transact((tx) => tx.schedule('explicit', at, { type: 't', trace: { traceparent } }));
    await store.transact((tx) => tx.schedule('none', at, { type: 't' }));
    expect((await store.loadSchedule('explicit'))?.message.trace).toEqual({ traceparent });
    expect((await store.loadSchedule('none'))?.message).toEqual({ type: 't' });
    const bad: [unknown, string][] = [
      ['x', 'message.trace'],
      [{ traceparent: 5 }, 'message.trace.traceparent'],
      [{ traceparent: 'x'.repeat(513) }, 'message.trace.traceparent'],
      [{ 'bad name': 'x' }, 'message.trace name'],
      [Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`k${i}`, 'v'])), 'message.trace'],
    ];
    for (const [trace, field] of bad) {
      const error = await store
        .transact((tx) => tx.schedule('bad', at, { type: 't', trace } as never))
        .catch((e: unknown) => e);
      expect(error, JSON.stringify(trace)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });

  it('is off with telemetry: false: no spans, no metrics', async () => {
    const { spans, tracerProvider, meterProvider, metrics } = sdk();
    api.trace.setGlobalTracerProvider(tracerProvider);
    api.metrics.setGlobalMeterProvider(meterProvider);
    try {
      const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
      const { store } = createMemoryBackend({ clock });
      let ran = 0;
      const off = new Dispatcher({ store, telemetry: false, processor: async () => void ran++ });
      await store.transact((tx) => tx.schedule('k', new Date(clock.now()), { type: 't' }));
      const ac = new AbortController();
      const done = off.run(ac.signal);
      await waitFor('delivered', () => ran === 1);
      ac.abort();
      await done;
      expect(spans.getFinishedSpans()).toEqual([]);
      expect((await metrics()).size).toBe(0);

      // Left out, the global providers are used.
      const on = new Dispatcher({ store, processor: async () => void ran++ });
      await store.transact((tx) => tx.schedule('k2', new Date(clock.now()), { type: 't' }));
      const ac2 = new AbortController();
      const done2 = on.run(ac2.signal);
      await waitFor('delivered with the global provider', () => spans.getFinishedSpans().length === 1);
      ac2.abort();
      await done2;
      expect(spans.getFinishedSpans()[0]?.name).toBe('process t');
    } finally {
      api.trace.disable();
      api.metrics.disable();
    }
  });
});
