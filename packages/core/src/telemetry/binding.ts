import { AsyncLocalStorage } from 'node:async_hooks';
import { InvalidArgumentError } from '../errors.js';
import { checkLogger } from '../factory/options.js';
import { defaultLogger, type Logger } from '../logger.js';
import { positiveInteger } from '../validate.js';
import { loadedOpenTelemetry, loadOpenTelemetry, onOpenTelemetryMissing } from './loader.js';
import type {
  OpenTelemetryApi,
  OtelContext,
  OtelContextManager,
  OtelMeterProvider,
  OtelPropagator,
  OtelTextMapGetter,
  OtelTextMapSetter,
  OtelTracerProvider,
  TelemetryOption,
  TelemetryOptions,
} from './otel.js';

/**
 * Which OpenTelemetry objects duetime talks to. Each part is the one given explicitly (`telemetry`
 * option, {@link configureTelemetry}), else the one the application registered globally, read straight
 * from the API's global registry: a copy of `@opentelemetry/api` refuses to read registrations made by an
 * older minor version, so going through duetime's own copy would lose an application's providers when the
 * two copies differ. The API module (given, or loaded lazily) is used only for its version-independent
 * helpers (`trace.setSpan`, `trace.getSpanContext`, `ROOT_CONTEXT`: contexts and spans are shared across
 * copies through `Symbol.for` keys).
 */

/** Where `@opentelemetry/api` 1.x keeps the application's global registrations. */
const GLOBAL_REGISTRY = Symbol.for('opentelemetry.js.api.1');

type GlobalPart = 'trace' | 'metrics' | 'context' | 'propagation';
const PARTS: readonly GlobalPart[] = ['trace', 'metrics', 'context', 'propagation'];
/** The methods duetime calls on each registered part. */
const METHODS: Record<GlobalPart, readonly string[]> = {
  trace: ['getTracer'],
  metrics: ['getMeter'],
  context: ['active', 'with'],
  propagation: ['inject', 'extract'],
};
/** The option that replaces each part. */
const OPTION_OF: Record<GlobalPart, string> = {
  trace: 'tracerProvider',
  metrics: 'meterProvider',
  context: 'contextManager',
  propagation: 'propagator',
};

/**
 * The resolved options carry the logger of the Dispatcher or Scheduler they belong to, and whether they
 * record trace context differently from the process (a `propagator` or `contextManager` of their own):
 * only then do processors and handlers run in their scope (an AsyncLocalStorage, which costs every
 * promise of the process something once in use).
 */
const LOGGER = Symbol('duetime.telemetry.logger');
const OWN_CAPTURE = Symbol('duetime.telemetry.ownCapture');
type ResolvedOptions = TelemetryOptions & { [LOGGER]?: Logger; [OWN_CAPTURE]?: boolean };

function globalRegistry(): Record<string, unknown> | undefined {
  const value = (globalThis as Record<symbol, unknown>)[GLOBAL_REGISTRY];
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
}

/** Whether the application registered any provider, context manager or propagator globally. */
export function hasGlobalRegistrations(): boolean {
  const registry = globalRegistry();
  return (
    registry !== undefined && PARTS.some((part) => registry[part] !== undefined && registry[part] !== null)
  );
}

// Each problem is said once per process: a setup does not change while it runs.
const warned = new Set<string>();
/** Where process-wide warnings go: configureTelemetry's logger, else the latest Dispatcher's or Scheduler's. */
let processLogger: Logger = defaultLogger;
let processLoggerFixed = false;

function warnOnce(logger: Logger, key: string, message: string, fields: Record<string, unknown> = {}): void {
  if (warned.has(key)) return;
  warned.add(key);
  logger.warn(message, fields);
}

function warnApiMissing(logger: Logger): void {
  warnOnce(
    logger,
    'api-missing',
    'OpenTelemetry: the application registered providers globally, but @duetime/core cannot import @opentelemetry/api, so deliveries, calendar runs and schedules go without spans, metrics and trace context; pass telemetry: { api } (the module the application imports) to each Dispatcher and Scheduler and to configureTelemetry()',
    { version: globalRegistry()?.version },
  );
}

onOpenTelemetryMissing(() => {
  if (givenApi === undefined && hasGlobalRegistrations()) warnApiMissing(processLogger);
});

/**
 * The part the application registered globally: `undefined` when none is, `null` when the one registered
 * lacks a method duetime calls (said once, naming the option to give instead).
 */
function registered<T>(part: GlobalPart, logger: Logger): T | undefined | null {
  const registry = globalRegistry();
  const value = registry?.[part];
  if (value === undefined || value === null) return undefined;
  const missing = METHODS[part].filter(
    (method) => typeof (value as Record<string, unknown>)[method] !== 'function',
  );
  if (missing.length === 0) return value as T;
  warnOnce(
    logger,
    `global-${part}`,
    `OpenTelemetry: the ${part} registered globally has no ${missing.join(' or ')}, so duetime cannot use it and goes without; pass telemetry.${OPTION_OF[part]}`,
    { version: registry?.version },
  );
  return null;
}

const SETTER: OtelTextMapSetter = {
  set(carrier, key, value) {
    carrier[key] = value;
  },
};
const GETTER: OtelTextMapGetter = {
  get(carrier, key) {
    return Object.hasOwn(carrier, key) ? carrier[key] : undefined;
  },
  keys(carrier) {
    return Object.keys(carrier);
  },
};

/** The OpenTelemetry objects one part of duetime uses (see the top of this file). */
export class OtelBinding {
  readonly api: OpenTelemetryApi;
  /** Whether `tx.schedule` inside its processors or handlers must record with it (see {@link runWithBinding}). */
  readonly ownCapture: boolean;
  readonly #options: TelemetryOptions;
  readonly #logger: Logger;

  constructor(api: OpenTelemetryApi, options: TelemetryOptions, logger: Logger, ownCapture = false) {
    this.api = api;
    this.ownCapture = ownCapture;
    this.#options = options;
    this.#logger = logger;
  }

  #contextManager(): OtelContextManager | undefined | null {
    return this.#options.contextManager ?? registered<OtelContextManager>('context', this.#logger);
  }

  #propagator(): OtelPropagator | undefined | null {
    return this.#options.propagator ?? registered<OtelPropagator>('propagation', this.#logger);
  }

  /** The active context (the root context when no context manager is registered). */
  active(): OtelContext {
    return this.#contextManager()?.active() ?? this.api.ROOT_CONTEXT;
  }

  /** Runs `fn` with `context` active. */
  with<T>(context: OtelContext, fn: () => T): T {
    const manager = this.#contextManager();
    return manager ? manager.with(context, fn) : fn();
  }

  /** Writes `context` into `carrier` (nothing without a propagator). */
  inject(context: OtelContext, carrier: Record<string, string>): void {
    this.#propagator()?.inject(context, carrier, SETTER);
  }

  /** Reads a context out of `carrier` (the root context without a propagator). */
  extract(carrier: Record<string, string>): OtelContext {
    const propagator = this.#propagator();
    return propagator ? propagator.extract(this.api.ROOT_CONTEXT, carrier, GETTER) : this.api.ROOT_CONTEXT;
  }

  tracerProvider(): OtelTracerProvider {
    const provider = this.#options.tracerProvider ?? registered<OtelTracerProvider>('trace', this.#logger);
    if (provider === null) throw new Error('the tracer provider registered globally has no getTracer');
    return provider ?? this.api.trace;
  }

  meterProvider(): OtelMeterProvider {
    const provider = this.#options.meterProvider ?? registered<OtelMeterProvider>('metrics', this.#logger);
    if (provider === null) throw new Error('the meter provider registered globally has no getMeter');
    return provider ?? this.api.metrics;
  }
}

/** A Dispatcher's or Scheduler's binding, over the API it attached with and its resolved options. */
export function bindingFor(api: OpenTelemetryApi, options: TelemetryOptions): OtelBinding {
  const resolved = options as ResolvedOptions;
  return new OtelBinding(api, options, resolved[LOGGER] ?? processLogger, resolved[OWN_CAPTURE] === true);
}

// The binding of the processor or calendar handler running: what its `tx.schedule` records with.
const scope = new AsyncLocalStorage<OtelBinding>();

/**
 * Runs `fn` (a processor, a calendar run) so that its `tx.schedule` records trace context with `binding`,
 * when that differs from the process's; else just runs it.
 */
export function runWithBinding<T>(binding: OtelBinding, fn: () => T): T {
  return binding.ownCapture ? scope.run(binding, fn) : fn();
}

let configured: TelemetryOption | undefined;
/**
 * An API module the application gave (any copy: duetime uses only its version-independent helpers), for
 * when duetime cannot import its own.
 */
let givenApi: OpenTelemetryApi | undefined;
let cached: { api: OpenTelemetryApi; options: TelemetryOptions; binding: OtelBinding } | undefined;
const NONE: TelemetryOptions = Object.freeze({});

/**
 * Sets the telemetry of every part of duetime that is given none of its own: the trace context
 * `tx.schedule` records outside processors and calendar handlers (an application's request handlers),
 * and Dispatchers and Schedulers constructed afterwards without a `telemetry` option. `false` turns
 * telemetry off for them; `undefined` restores the default (the global registrations, through
 * `@opentelemetry/api` loaded lazily). `logger` receives the process-wide warnings (default: the latest
 * Dispatcher's or Scheduler's logger).
 *
 * @example configureTelemetry({ api, tracerProvider, meterProvider, propagator, contextManager })
 * @throws {InvalidArgumentError} naming the field and value.
 */
export function configureTelemetry(options: TelemetryOption | undefined, logger?: Logger): void {
  configured = checkTelemetryOption(options, 'options');
  if (configured !== false && configured?.api !== undefined) givenApi = configured.api;
  cached = undefined;
  if (logger !== undefined) {
    processLogger = checkLogger(logger, 'logger');
    processLoggerFixed = true;
  } else processLoggerFixed = false;
}

/**
 * A Dispatcher's or Scheduler's `telemetry` option, checked and resolved: its own when given, else what
 * {@link configureTelemetry} set; carrying `logger` for the warnings of its telemetry.
 *
 * @throws {InvalidArgumentError} naming `field` (or one of its fields) and the value.
 */
export function resolveTelemetryOption(
  option: TelemetryOption | undefined,
  logger: Logger,
  field = 'options.telemetry',
): TelemetryOption {
  const own = checkTelemetryOption(option, field);
  if (!processLoggerFixed) processLogger = logger;
  const chosen = own === undefined ? configured : own;
  if (chosen === false) return false;
  const mine = own === false ? undefined : own;
  if (mine?.api !== undefined) givenApi = mine.api;
  const ownCapture = mine?.propagator !== undefined || mine?.contextManager !== undefined;
  return { ...(chosen ?? NONE), [LOGGER]: logger, [OWN_CAPTURE]: ownCapture } as ResolvedOptions;
}

/**
 * The binding `tx.schedule` records trace context with: the running processor's or calendar handler's,
 * else the process's ({@link configureTelemetry}, else the global registrations). `null` when there is
 * none (no API, or telemetry configured off); a promise only while the lazy import of the API runs.
 */
export function currentBinding(): OtelBinding | null | Promise<OtelBinding | null> {
  const scoped = scope.getStore();
  if (scoped) return scoped;
  if (configured === false) return null;
  const options = configured ?? NONE;
  const api = options.api ?? loadedOpenTelemetry();
  if (api === undefined)
    return loadOpenTelemetry().then((loaded) => {
      const usable = loaded ?? givenApi;
      return usable ? processBinding(usable, options) : absent();
    });
  const usable = api ?? givenApi;
  return usable ? processBinding(usable, options) : absent();
}

function processBinding(api: OpenTelemetryApi, options: TelemetryOptions): OtelBinding {
  if (cached?.api === api && cached.options === options) return cached.binding;
  const binding = new OtelBinding(api, options, processLogger);
  cached = { api, options, binding };
  return binding;
}

function absent(): null {
  if (hasGlobalRegistrations()) warnApiMissing(processLogger);
  return null;
}

/** Checks a `telemetry` option: `undefined`, `false`, or an object whose given fields fit. */
export function checkTelemetryOption(option: unknown, field: string): TelemetryOption | undefined {
  if (option === undefined || option === false) return option;
  if (typeof option !== 'object' || option === null || Array.isArray(option))
    throw new InvalidArgumentError(
      field,
      option,
      'must be false or { api?, tracerProvider?, meterProvider?, propagator?, contextManager?, countLimit? }',
    );
  const o = option as Record<string, unknown>;
  const has = (name: string, methods: string[], what: string) => {
    const value = o[name];
    if (value === undefined) return;
    for (const method of methods) {
      const target = method
        .split('.')
        .reduce<unknown>((at, step) => (at as Record<string, unknown> | null | undefined)?.[step], value);
      if (typeof target !== 'function')
        throw new InvalidArgumentError(`${field}.${name}`, value, `must be ${what} (it has no ${method})`);
    }
  };
  has(
    'api',
    ['trace.getTracer', 'trace.setSpan', 'trace.getSpanContext', 'metrics.getMeter', 'context.with'],
    "the '@opentelemetry/api' module",
  );
  if (o.api !== undefined && typeof (o.api as { ROOT_CONTEXT?: unknown }).ROOT_CONTEXT !== 'object')
    throw new InvalidArgumentError(`${field}.api`, o.api, "must be the '@opentelemetry/api' module");
  has('tracerProvider', ['getTracer'], 'a TracerProvider');
  has('meterProvider', ['getMeter'], 'a MeterProvider');
  has('propagator', ['inject', 'extract'], 'a TextMapPropagator');
  has('contextManager', ['active', 'with'], 'a ContextManager');
  if (o.countLimit !== undefined) positiveInteger(`${field}.countLimit`, o.countLimit, { allowZero: true });
  return option as TelemetryOption;
}
