import type { ObservedPart } from '../dispatch/batch.js';
import { UnrecoverableError } from '../dispatch/types.js';
import type { Store } from '../store/store.js';
import { bindingFor, type OtelBinding, runWithBinding } from './binding.js';
import { SpanKind, SpanStatus } from './constants.js';
import { linkedContext } from './context.js';
import type {
  OpenTelemetryApi,
  OtelAttributes,
  OtelCounter,
  OtelHistogram,
  OtelObservable,
  OtelObservableResult,
  OtelSpan,
  OtelTracer,
  TelemetryOptions,
} from './otel.js';

/** The instrumentation scope of duetime's spans and metrics. */
export const INSTRUMENTATION_SCOPE = '@duetime/core';

/** Bucket boundaries (seconds) for lateness and processing time: 1 ms to 10 minutes. */
export const SECONDS_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
];

/** Renders an error for a span status: short and never throwing. */
function errorText(error: unknown): string {
  try {
    return error instanceof Error
      ? `${error.name}: ${error.message}`.slice(0, 500)
      : String(error).slice(0, 500);
  } catch {
    return '[unprintable error]';
  }
}

/** The options of a delivery span without a link (shared: the tracer only reads them). */
const CONSUMER = Object.freeze({ kind: SpanKind.CONSUMER });
/** The trace id of an invalid span context (a no-op tracer's spans). */
const INVALID_TRACE_ID = '00000000000000000000000000000000';

const FATE_ATTRIBUTE: Record<string, string> = {
  delivered: 'delivered',
  failed: 'failed',
  retried: 'retried',
  deadLettered: 'dead_lettered',
  skipped: 'skipped',
  conflict: 'conflict',
  missed: 'missed',
  rolledBack: 'rolled_back',
};

/**
 * A dispatcher's spans and metrics. One CONSUMER span per delivered part, named `process <message type>`
 * (OpenTelemetry messaging conventions), active while the processor runs, ended once the batch commit
 * decided the part's fate; linked to the scheduling transaction's span when the message carries its trace.
 * Every part goes through the dispatcher's {@link OtelBinding}: its providers, propagator and context
 * manager, also for the trace context its processors' `tx.schedule` records.
 */
export class DeliveryTelemetry {
  readonly #binding: OtelBinding;
  readonly #tracer: OtelTracer;
  readonly #backend: string;
  readonly #deliveries: OtelCounter;
  readonly #lateness: OtelHistogram;
  readonly #duration: OtelHistogram;
  readonly #gauges: { gauge: OtelObservable; callback: (result: OtelObservableResult) => Promise<void> }[] =
    [];
  readonly #metricAttributes = new Map<
    string,
    { metric: OtelAttributes; outcome: OtelAttributes; process: OtelAttributes }
  >();

  constructor(api: OpenTelemetryApi, options: TelemetryOptions, store: Store<unknown>, now: () => number) {
    this.#binding = bindingFor(api, options);
    this.#backend = store.backendName;
    this.#tracer = this.#binding.tracerProvider().getTracer(INSTRUMENTATION_SCOPE);
    const meter = this.#binding.meterProvider().getMeter(INSTRUMENTATION_SCOPE);
    this.#deliveries = meter.createCounter('duetime.deliveries', {
      description:
        'Delivery attempts by outcome (delivered, failed, retried, dead_lettered, skipped, missed)',
      unit: '{delivery}',
    });
    this.#lateness = meter.createHistogram('duetime.delivery.lateness', {
      description: 'How long after its due time a delivery attempt started',
      unit: 's',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    this.#duration = meter.createHistogram('messaging.process.duration', {
      description: 'How long a processor took (the part of a delivery batch for one message)',
      unit: 's',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    const limit = options.countLimit ?? 1000;
    if (limit > 0) {
      const common = { 'messaging.system': 'duetime', 'duetime.backend': this.#backend };
      const pending = meter.createObservableGauge('duetime.schedules.pending', {
        description: `Active schedules in the store (counted up to ${limit})`,
        unit: '{schedule}',
      });
      const due = meter.createObservableGauge('duetime.schedules.due', {
        description: `Active schedules due now (counted up to ${limit})`,
        unit: '{schedule}',
      });
      const countPending = async (result: OtelObservableResult) => {
        result.observe(await store.countSchedules({ limit }), common);
      };
      const countDue = async (result: OtelObservableResult) => {
        result.observe(await store.countSchedules({ order: 'due', through: new Date(now()), limit }), common);
      };
      pending.addCallback(countPending);
      due.addCallback(countDue);
      this.#gauges.push({ gauge: pending, callback: countPending }, { gauge: due, callback: countDue });
    }
  }

  /**
   * Starts the part's span (before its processor runs). The span starts with its kind, name and link; the
   * rest of its attributes are set only when it records (a no-op tracer's spans cost no attribute work).
   */
  begin(part: ObservedPart): void {
    const { schedule } = part;
    const link = linkedContext(this.#binding, schedule.message.trace);
    const span = this.#tracer.startSpan(
      `process ${schedule.message.type}`,
      link ? { kind: SpanKind.CONSUMER, links: [{ context: link }] } : CONSUMER,
      this.#binding.active(),
    );
    part.handle = span;
    if (!span.isRecording()) return;
    const { occurrence } = part;
    const attributes: OtelAttributes = {
      'messaging.system': 'duetime',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': schedule.message.type,
      'messaging.message.id': occurrence?.id ?? `${schedule.key}@${schedule.version}`,
      'duetime.schedule.key': schedule.key,
      'duetime.schedule.version': schedule.version,
      'duetime.delivery.attempt': part.attempt,
      'duetime.delivery.lateness_ms': part.latenessMs,
      'duetime.backend': this.#backend,
    };
    if (occurrence) {
      attributes['duetime.occurrence.id'] = occurrence.id;
      attributes['duetime.occurrence.at'] = occurrence.at.toISOString();
    }
    if (schedule.message.aggregateId !== undefined)
      attributes['duetime.message.aggregate_id'] = schedule.message.aggregateId;
    span.setAttributes(attributes);
  }

  /**
   * Runs `fn` with the part's span active, so the processor's own spans are its children, and with the
   * dispatcher's binding as the one its `tx.schedule` records trace context with.
   */
  run<T>(part: ObservedPart, fn: () => T): T {
    const binding = this.#binding;
    const span = part.handle as OtelSpan | undefined;
    // A no-op tracer's span has no valid context: there is nothing to make active.
    const context = span?.spanContext();
    if (
      !span ||
      !context ||
      context.traceId === INVALID_TRACE_ID ||
      !binding.api.trace.isSpanContextValid(context)
    )
      return runWithBinding(binding, fn);
    return runWithBinding(binding, () => binding.with(binding.api.trace.setSpan(binding.active(), span), fn));
  }

  /** The metric attributes of a type and outcome, made once. */
  #attributes(
    type: string,
    fate: string,
  ): { metric: OtelAttributes; outcome: OtelAttributes; process: OtelAttributes } {
    const id = `${fate}\u0000${type}`;
    let cached = this.#metricAttributes.get(id);
    if (!cached) {
      const metric = {
        'messaging.system': 'duetime',
        'messaging.destination.name': type,
        'duetime.backend': this.#backend,
      };
      cached = {
        metric,
        outcome: { ...metric, 'duetime.delivery.outcome': fate },
        process: { ...metric, 'messaging.operation.name': 'process' },
      };
      // Bounded: message types times outcomes; an application with unbounded types gets a fresh map.
      if (this.#metricAttributes.size >= 10_000) this.#metricAttributes.clear();
      this.#metricAttributes.set(id, cached);
    }
    return cached;
  }

  /** Records the part's fate: ends its span and counts it. */
  settle(part: ObservedPart): void {
    const fate = FATE_ATTRIBUTE[part.fate ?? 'rolledBack'] ?? 'rolled_back';
    const attributes = this.#attributes(part.schedule.message.type, fate);
    // A missed part stands for every occurrence its decision did not run.
    this.#deliveries.add(part.outcome === 'missed' ? (part.missed?.count ?? 1) : 1, attributes.outcome);
    if (part.outcome !== 'missed') {
      this.#lateness.record(part.latenessMs / 1000, attributes.metric);
      this.#duration.record(part.durationMs / 1000, attributes.process);
    }
    const span = part.handle as OtelSpan | undefined;
    if (!span) return;
    if (!span.isRecording()) {
      span.end();
      return;
    }
    span.setAttribute('duetime.delivery.outcome', fate);
    if (part.error !== undefined && fate !== 'retried') {
      span.recordException(part.error instanceof Error ? part.error : errorText(part.error));
      if (part.error instanceof Error) span.setAttribute('error.type', part.error.name);
      if (part.error instanceof UnrecoverableError) span.setAttribute('duetime.delivery.unrecoverable', true);
    }
    if (part.retryAt) span.setAttribute('duetime.delivery.retry_at', part.retryAt.toISOString());
    if (fate === 'failed' || fate === 'dead_lettered')
      span.setStatus({ code: SpanStatus.ERROR, message: errorText(part.error) });
    else if (fate === 'rolled_back')
      span.setStatus({
        code: SpanStatus.ERROR,
        message: 'the delivery batch rolled back; the message stays pending',
      });
    span.end();
  }

  /** Stops the gauges' callbacks. */
  close(): void {
    for (const { gauge, callback } of this.#gauges) gauge.removeCallback(callback);
    this.#gauges.length = 0;
  }
}
