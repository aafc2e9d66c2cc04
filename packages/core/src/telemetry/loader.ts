import type { OpenTelemetryApi } from './otel.js';

/**
 * Loads the optional peer `@opentelemetry/api` once, lazily: nothing is imported until telemetry can be
 * useful (a dispatcher or scheduler starts, a transaction records its trace context).
 */

/** The package name, in a variable so that bundlers and TypeScript leave the optional import alone. */
const PACKAGE = '@opentelemetry/api';

let loaded: OpenTelemetryApi | null | undefined;
let loading: Promise<OpenTelemetryApi | null> | undefined;
let importer: (name: string) => Promise<unknown> = (name) => import(name);
let whenMissing: (() => void) | undefined;

/** Calls `listener` when the import settles without the API (once per load). */
export function onOpenTelemetryMissing(listener: () => void): void {
  whenMissing = listener;
}

/**
 * `@opentelemetry/api`, imported once on first call: `null` when the application does not have it.
 * Resolves at once after the first call settled.
 */
export function loadOpenTelemetry(): Promise<OpenTelemetryApi | null> {
  if (loaded !== undefined) return Promise.resolve(loaded);
  loading ??= importer(PACKAGE).then(
    (value: unknown) => {
      const module = value as { default?: unknown };
      const api = (
        isApi(module) ? module : isApi(module.default) ? module.default : null
      ) as OpenTelemetryApi | null;
      loaded = api;
      if (api === null) whenMissing?.();
      return api;
    },
    () => {
      loaded = null;
      whenMissing?.();
      return null;
    },
  );
  return loading;
}

/** The API when {@link loadOpenTelemetry} already settled: the module, `null` (absent), or `undefined` (not yet known). */
export function loadedOpenTelemetry(): OpenTelemetryApi | null | undefined {
  return loaded;
}

/**
 * Forgets the loaded API and imports it with `load` from then on (default `import()`). For tests that
 * play an application whose `@opentelemetry/api` duetime cannot import.
 */
export function resetOpenTelemetryLoader(load?: (name: string) => Promise<unknown>): void {
  loaded = undefined;
  loading = undefined;
  importer = load ?? ((name) => import(name));
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
