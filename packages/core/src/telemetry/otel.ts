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
 * How a {@link Dispatcher} or a {@link Scheduler} reports to OpenTelemetry (its `telemetry` option).
 *
 * - Left out: `@opentelemetry/api` is loaded lazily when `run()` starts, if the application has it
 *   installed, and the globally registered tracer and meter providers are used (no-ops until an SDK
 *   registers real ones). When the package is absent nothing is loaded and nothing is measured.
 * - `false`: no spans and no metrics, whatever is installed.
 * - An object: the API module to use (`api: await import('@opentelemetry/api')`, or the module the
 *   application already imported) and, optionally, providers to use instead of the global ones.
 */
export interface TelemetryOptions {
  /** The `@opentelemetry/api` module. Default: loaded lazily with `import()`. */
  api?: OpenTelemetryApi;
  /** Where spans go (default: the API's global provider). */
  tracerProvider?: OtelTracerProvider;
  /** Where metrics go (default: the API's global provider). */
  meterProvider?: OtelMeterProvider;
  /**
   * Most schedules counted for the `duetime.schedules.pending` and `duetime.schedules.due` gauges (default
   * 1,000): a count that reaches it reads as this number (at least that many). 0 turns both gauges off.
   */
  countLimit?: number;
}

/** The `telemetry` option of a Dispatcher or Scheduler. */
export type TelemetryOption = TelemetryOptions | false;

/** The package name, in a variable so that bundlers and TypeScript leave the optional import alone. */
const PACKAGE = '@opentelemetry/api';

let loaded: OpenTelemetryApi | null | undefined;
let loading: Promise<OpenTelemetryApi | null> | undefined;

/**
 * `@opentelemetry/api`, imported once on first call: `null` when the application does not have it.
 * Resolves at once after the first call settled.
 */
export function loadOpenTelemetry(): Promise<OpenTelemetryApi | null> {
  if (loaded !== undefined) return Promise.resolve(loaded);
  loading ??= import(PACKAGE).then(
    (module: { default?: unknown }) => {
      const api = (
        isApi(module) ? module : isApi(module.default) ? module.default : null
      ) as OpenTelemetryApi | null;
      loaded = api;
      return api;
    },
    () => {
      loaded = null;
      return null;
    },
  );
  return loading;
}

/** The API when {@link loadOpenTelemetry} already settled: the module, `null` (absent), or `undefined` (not yet known). */
export function loadedOpenTelemetry(): OpenTelemetryApi | null | undefined {
  return loaded;
}

function isApi(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Partial<OpenTelemetryApi>;
  return (
    typeof v.trace?.getTracer === 'function' &&
    typeof v.metrics?.getMeter === 'function' &&
    typeof v.context?.with === 'function' &&
    typeof v.propagation?.inject === 'function'
  );
}
