/**
 * The part of the OpenTelemetry API (`@opentelemetry/api` 1.x) duetime uses, described structurally so
 * that core neither depends on the package nor names it in its types: `@opentelemetry/api` is an optional
 * peer dependency, loaded lazily the first time it can be useful, and the module itself fits
 * {@link OpenTelemetryApi}.
 */

/** An OpenTelemetry context (opaque). */
export type OtelContext = object;

export interface OtelSpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: unknown;
  isRemote?: boolean;
}

export type OtelAttributes = Record<string, unknown>;

export interface OtelSpan {
  spanContext(): OtelSpanContext;
  setAttribute(key: string, value: string | number | boolean): unknown;
  setAttributes(attributes: OtelAttributes): unknown;
  isRecording(): boolean;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: string | Error): unknown;
  end(): void;
}

export interface OtelSpanOptions {
  kind?: number;
  attributes?: OtelAttributes;
  links?: { context: OtelSpanContext; attributes?: OtelAttributes }[];
}

export interface OtelTracer {
  startSpan(name: string, options?: OtelSpanOptions, context?: OtelContext): OtelSpan;
}

export interface OtelTracerProvider {
  getTracer(name: string, version?: string): OtelTracer;
}

export interface OtelCounter {
  add(value: number, attributes?: OtelAttributes): void;
}

export interface OtelHistogram {
  record(value: number, attributes?: OtelAttributes): void;
}

export interface OtelObservableResult {
  observe(value: number, attributes?: OtelAttributes): void;
}

export interface OtelObservable {
  addCallback(callback: (result: OtelObservableResult) => void | Promise<void>): void;
  removeCallback(callback: (result: OtelObservableResult) => void | Promise<void>): void;
}

export interface OtelInstrumentOptions {
  description?: string;
  unit?: string;
  advice?: { explicitBucketBoundaries?: number[] };
}

export interface OtelMeter {
  createCounter(name: string, options?: OtelInstrumentOptions): OtelCounter;
  createHistogram(name: string, options?: OtelInstrumentOptions): OtelHistogram;
  createObservableGauge(name: string, options?: OtelInstrumentOptions): OtelObservable;
}

export interface OtelMeterProvider {
  getMeter(name: string, version?: string): OtelMeter;
}

/** Where the active context is read and set: an OpenTelemetry `ContextManager`. */
export interface OtelContextManager {
  active(): OtelContext;
  with<T>(context: OtelContext, fn: () => T): T;
}

/** Writes a field into a carrier (an OpenTelemetry `TextMapSetter`). */
export interface OtelTextMapSetter {
  set(carrier: Record<string, string>, key: string, value: string): void;
}

/** Reads a carrier's fields (an OpenTelemetry `TextMapGetter`). */
export interface OtelTextMapGetter {
  get(carrier: Record<string, string>, key: string): string | string[] | undefined;
  keys(carrier: Record<string, string>): string[];
}

/** Writes a context into text fields and reads it back: an OpenTelemetry `TextMapPropagator`. */
export interface OtelPropagator {
  inject(context: OtelContext, carrier: Record<string, string>, setter: OtelTextMapSetter): void;
  extract(context: OtelContext, carrier: Record<string, string>, getter: OtelTextMapGetter): OtelContext;
  fields(): string[];
}

/** What duetime uses of `@opentelemetry/api`; the module itself fits it. */
export interface OpenTelemetryApi {
  trace: OtelTracerProvider & {
    setSpan(context: OtelContext, span: OtelSpan): OtelContext;
    getSpanContext(context: OtelContext): OtelSpanContext | undefined;
    isSpanContextValid(spanContext: OtelSpanContext): boolean;
  };
  metrics: OtelMeterProvider;
  context: {
    active(): OtelContext;
    with<T>(context: OtelContext, fn: () => T): T;
  };
  propagation: {
    inject(context: OtelContext, carrier: Record<string, string>): void;
    extract(context: OtelContext, carrier: Record<string, string>): OtelContext;
  };
  ROOT_CONTEXT: OtelContext;
}

/**
 * How a {@link Dispatcher} or a {@link Scheduler} reports to OpenTelemetry (its `telemetry` option), and
 * what {@link configureTelemetry} sets for the whole process.
 *
 * - Left out: what {@link configureTelemetry} set, else `@opentelemetry/api` loaded lazily when `run()`
 *   starts (if the application has it installed) with what the application registered globally: tracer
 *   and meter providers, context manager, propagator (no-ops until an SDK registers real ones). When the
 *   package is absent nothing is loaded and nothing is measured.
 * - `false`: no spans and no metrics, whatever is installed.
 * - An object: the API module to use (`api: await import('@opentelemetry/api')`, or the module the
 *   application already imported) and, optionally, providers, a propagator and a context manager to use
 *   instead of the global ones. A Dispatcher's also serve `tx.schedule` in its processors (the trace
 *   context they record), a Scheduler's in its handlers.
 *
 * Whatever is not given explicitly is what the application registered globally, read from the API's
 * global registry (`Symbol.for('opentelemetry.js.api.1')`): duetime uses those registrations whichever
 * copy of `@opentelemetry/api` made them, even one whose version duetime's own copy would refuse to read
 * (an application on API 1.3 while duetime resolves 1.9). When it cannot use them it says so once, at warn
 * level, and names the option that fixes it.
 */
export interface TelemetryOptions {
  /** The `@opentelemetry/api` module. Default: loaded lazily with `import()`. */
  api?: OpenTelemetryApi;
  /** Where spans go (default: the tracer provider registered globally). */
  tracerProvider?: OtelTracerProvider;
  /** Where metrics go (default: the meter provider registered globally). */
  meterProvider?: OtelMeterProvider;
  /**
   * How a message's trace context is written (`tx.schedule`) and read back (at delivery). Default: the
   * propagator registered globally (W3C trace context with the SDK's defaults).
   */
  propagator?: OtelPropagator;
  /**
   * Where the active span is read (`tx.schedule`) and where the delivery's span is made active for the
   * processor. Default: the context manager registered globally.
   */
  contextManager?: OtelContextManager;
  /**
   * Most schedules counted for the `duetime.schedules.pending` and `duetime.schedules.due` gauges (default
   * 1,000): a count that reaches it reads as this number (at least that many). 0 turns both gauges off.
   */
  countLimit?: number;
}

/** The `telemetry` option of a Dispatcher or Scheduler. */
export type TelemetryOption = TelemetryOptions | false;

export { loadedOpenTelemetry, loadOpenTelemetry } from './loader.js';
