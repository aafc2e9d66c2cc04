import { validTrace } from '../store/message.js';
import type { MessageTrace } from '../store/types.js';
import {
  loadedOpenTelemetry,
  loadOpenTelemetry,
  type OpenTelemetryApi,
  type OtelSpanContext,
} from './otel.js';

/**
 * The active span's context as propagation fields (`traceparent`, `tracestate`, or whatever the globally
 * registered propagator writes), for `Message.trace`. Undefined when `@opentelemetry/api` is absent, no
 * span is active, or the propagator writes nothing (no SDK registered).
 */
export async function activeTrace(): Promise<MessageTrace | undefined> {
  let api = loadedOpenTelemetry();
  if (api === undefined) api = await loadOpenTelemetry();
  if (!api) return undefined;
  return traceOf(api);
}

/**
 * Like {@link activeTrace}, without waiting once the API's presence is known: the fields, or undefined;
 * a promise only while the lazy import is still under way.
 */
export function activeTraceNow(): MessageTrace | undefined | Promise<MessageTrace | undefined> {
  const api = loadedOpenTelemetry();
  if (api === undefined) return activeTrace();
  return api ? traceOf(api) : undefined;
}

function traceOf(api: OpenTelemetryApi): MessageTrace | undefined {
  const context = api.context.active();
  const span = api.trace.getSpanContext(context);
  if (!span || !api.trace.isSpanContextValid(span)) return undefined;
  const carrier: Record<string, string> = {};
  api.propagation.inject(context, carrier);
  if (Object.keys(carrier).length === 0) return undefined;
  try {
    return validTrace(carrier);
  } catch {
    // A propagator writing more than a message may carry: the delivery goes without a link.
    return undefined;
  }
}

/** The span context a message's `trace` names, for a link; undefined when it names none. */
export function linkedContext(
  api: OpenTelemetryApi,
  trace: MessageTrace | undefined,
): OtelSpanContext | undefined {
  if (trace === undefined) return undefined;
  const context = api.propagation.extract(api.ROOT_CONTEXT, { ...trace });
  const span = api.trace.getSpanContext(context);
  return span && api.trace.isSpanContextValid(span) ? span : undefined;
}
