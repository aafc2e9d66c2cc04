import type { ScheduleRecord } from '../calendar/decide/records.js';
import { bindingFor, type OtelBinding, runWithBinding } from './binding.js';
import { SpanKind, SpanStatus } from './constants.js';
import { INSTRUMENTATION_SCOPE, SECONDS_BUCKETS } from './delivery.js';
import type {
  OpenTelemetryApi,
  OtelCounter,
  OtelHistogram,
  OtelObservable,
  OtelObservableResult,
  OtelSpan,
  OtelTracer,
  TelemetryOptions,
} from './otel.js';

/** Where a scheduler stands, for the leadership gauges. */
export interface LeadershipView {
  group: string;
  namespace: string;
  environment: string;
  leading(): boolean;
  epoch(): number | undefined;
}

/**
 * A scheduler's spans and metrics: one INTERNAL span per occurrence run, named `run <schedule id>`,
 * active while its hooks and handler run and ended with the record's final state; counters of records by
 * state and reason, a lateness histogram, and leadership gauges.
 */
export class CalendarTelemetry {
  readonly #binding: OtelBinding;
  readonly #tracer: OtelTracer;
  readonly #view: LeadershipView;
  readonly #runs: OtelCounter;
  readonly #lateness: OtelHistogram;
  readonly #changes: OtelCounter;
  readonly #spans = new Map<number, OtelSpan>();
  readonly #gauges: { gauge: OtelObservable; callback: (result: OtelObservableResult) => void }[] = [];

  constructor(api: OpenTelemetryApi, options: TelemetryOptions, view: LeadershipView) {
    this.#binding = bindingFor(api, options);
    this.#view = view;
    this.#tracer = this.#binding.tracerProvider().getTracer(INSTRUMENTATION_SCOPE);
    const meter = this.#binding.meterProvider().getMeter(INSTRUMENTATION_SCOPE);
    this.#runs = meter.createCounter('duetime.calendar.runs', {
      description: 'Occurrences decided, by final state and reason',
      unit: '{occurrence}',
    });
    this.#lateness = meter.createHistogram('duetime.calendar.lateness', {
      description: 'How long after its intended instant an occurrence started',
      unit: 's',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    this.#changes = meter.createCounter('duetime.leadership.changes', {
      description: 'Leadership acquired and lost by this replica',
      unit: '{change}',
    });
    const leader = meter.createObservableGauge('duetime.leadership', {
      description: '1 while this replica leads its calendar group, else 0',
      unit: '1',
    });
    const epoch = meter.createObservableGauge('duetime.leadership.epoch', {
      description: "The fencing token of this replica's leadership (while it leads)",
      unit: '1',
    });
    const leading = (result: OtelObservableResult) => result.observe(view.leading() ? 1 : 0, this.#group());
    const token = (result: OtelObservableResult) => {
      const value = view.epoch();
      if (value !== undefined) result.observe(value, this.#group());
    };
    leader.addCallback(leading);
    epoch.addCallback(token);
    this.#gauges.push({ gauge: leader, callback: leading }, { gauge: epoch, callback: token });
  }

  #group() {
    return {
      'duetime.calendar.group': this.#view.group,
      'duetime.calendar.namespace': this.#view.namespace,
      'duetime.calendar.environment': this.#view.environment,
    };
  }

  /** Runs a started occurrence's work inside its span (and the scheduler's telemetry). */
  run<T>(record: ScheduleRecord, fn: () => T): T {
    const started = record.startedAt?.getTime() ?? Date.now();
    const latenessMs = Math.max(0, started - record.intendedAt.getTime());
    const span = this.#tracer.startSpan(
      `run ${record.schedule}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          ...this.#group(),
          'duetime.calendar.schedule': record.schedule,
          'duetime.occurrence.id': record.occurrence,
          'duetime.occurrence.at': record.intendedAt.toISOString(),
          'duetime.occurrence.origin': record.origin,
          'duetime.calendar.lateness_ms': latenessMs,
          ...(record.epoch !== undefined ? { 'duetime.leadership.epoch': record.epoch } : {}),
        },
      },
      this.#binding.active(),
    );
    this.#spans.set(record.seq, span);
    this.#lateness.record(latenessMs / 1000, {
      ...this.#group(),
      'duetime.calendar.schedule': record.schedule,
    });
    const binding = this.#binding;
    // The handler's own spans are children of the run's; its `tx.schedule` records with this binding.
    return runWithBinding(binding, () => binding.with(binding.api.trace.setSpan(binding.active(), span), fn));
  }

  /** A record reached its final state: counts it and ends its span (if it ran). */
  finished(record: ScheduleRecord): void {
    this.#runs.add(record.count ?? 1, {
      ...this.#group(),
      'duetime.calendar.schedule': record.schedule,
      'duetime.calendar.state': record.state,
      ...(record.reason ? { 'duetime.calendar.reason': record.reason } : {}),
    });
    const span = this.#spans.get(record.seq);
    if (!span) return;
    this.#spans.delete(record.seq);
    span.setAttribute('duetime.calendar.state', record.state);
    if (record.reason) span.setAttribute('duetime.calendar.reason', record.reason);
    if (record.state === 'failed') {
      if (record.error) span.recordException(record.error);
      span.setStatus({ code: SpanStatus.ERROR, message: record.error ?? record.reason ?? 'failed' });
    }
    span.end();
  }

  leadership(kind: 'acquired' | 'lost'): void {
    this.#changes.add(1, { ...this.#group(), 'duetime.leadership.change': kind });
  }

  close(): void {
    for (const { gauge, callback } of this.#gauges) gauge.removeCallback(callback);
    this.#gauges.length = 0;
  }
}
