import { validTrace } from '../store/message.js';
import type { MessageTrace } from '../store/types.js';
import { currentBinding, type OtelBinding } from './binding.js';
import type { OtelSpanContext } from './otel.js';

/**
 * The active span's context as propagation fields (`traceparent`, `tracestate`, or whatever the
 * propagator writes), for `Message.trace`: read with the running processor's or calendar handler's
 * telemetry, else what {@link configureTelemetry} set, else what the application registered globally.
 * Undefined when `@opentelemetry/api` is absent, no span is active, or the propagator writes nothing.
 */
export async function activeTrace(): Promise<MessageTrace | undefined> {
  const binding = await currentBinding();
  return binding ? traceOf(binding) : undefined;
}

/**
 * Like {@link activeTrace}, without waiting once the API's presence is known: the fields, or undefined;
 * a promise only while the lazy import is still under way.
 */
export function activeTraceNow(): MessageTrace | undefined | Promise<MessageTrace | undefined> {
  const binding = currentBinding();
  if (binding instanceof Promise) return binding.then((b) => (b ? traceOf(b) : undefined));
  return binding ? traceOf(binding) : undefined;
}

function traceOf(binding: OtelBinding): MessageTrace | undefined {
  const context = binding.active();
  const span = binding.api.trace.getSpanContext(context);
  if (!span || !binding.api.trace.isSpanContextValid(span)) return undefined;
  const carrier: Record<string, string> = {};
  binding.inject(context, carrier);
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
  binding: OtelBinding,
  trace: MessageTrace | undefined,
): OtelSpanContext | undefined {
  if (trace === undefined) return undefined;
  const context = binding.extract({ ...trace });
  const span = binding.api.trace.getSpanContext(context);
  return span && binding.api.trace.isSpanContextValid(span) ? span : undefined;
}
