import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  type MetricData,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { Logger } from '../../src/index.js';

/** An application's OpenTelemetry SDK: spans and metrics kept in memory. */
export function memorySdk() {
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
  const finished = (name: string): ReadableSpan | undefined =>
    spans.getFinishedSpans().find((s) => s.name === name);
  return { spans, tracerProvider, meterProvider, metrics, finished };
}

/** The sum of a counter's points. */
export function total(metric: MetricData | undefined): number {
  return (metric?.dataPoints ?? []).reduce((sum, point) => sum + (point.value as number), 0);
}

/** A logger that keeps its warnings. */
export function warningLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn(message) {
      warnings.push(message);
    },
    error() {},
  };
}

/** `traceparent` for a span context, as the W3C propagator writes it. */
export function traceparent(context: { traceId: string; spanId: string }): string {
  return `00-${context.traceId}-${context.spanId}-01`;
}
