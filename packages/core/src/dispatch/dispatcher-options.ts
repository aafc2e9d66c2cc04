import { InvalidArgumentError } from '../errors.js';
import type { TelemetryOption } from '../telemetry/otel.js';
import { positiveInteger } from '../validate.js';
import {
  type DispatcherOptions,
  type MessageTypes,
  type Processor,
  UnknownMessageTypeError,
} from './types.js';

/** Checks the `telemetry` option. */
export function telemetryOption(option: unknown): TelemetryOption | undefined {
  if (option === undefined || option === false) return option;
  if (typeof option !== 'object' || option === null)
    throw new InvalidArgumentError(
      'options.telemetry',
      option,
      'must be false or { api?, tracerProvider?, meterProvider?, countLimit? }',
    );
  const o = option as Record<string, unknown>;
  if (
    o.api !== undefined &&
    typeof (o.api as { trace?: { getTracer?: unknown } }).trace?.getTracer !== 'function'
  )
    throw new InvalidArgumentError('options.telemetry.api', o.api, "must be the '@opentelemetry/api' module");
  if (o.countLimit !== undefined)
    positiveInteger('options.telemetry.countLimit', o.countLimit, { allowZero: true });
  return option as TelemetryOption;
}

/** The one processor a dispatcher runs: `processor`, or a router over `handlers` by message type. */
export function processorOf<M extends MessageTypes, Sql>(options: DispatcherOptions<M, Sql>): Processor<Sql> {
  const { processor, handlers } = options;
  if (processor !== undefined && handlers !== undefined)
    throw new InvalidArgumentError(
      'options.handlers',
      handlers,
      'give either processor or handlers, not both',
    );
  if (handlers === undefined) {
    if (typeof processor !== 'function')
      throw new InvalidArgumentError(
        'options.processor',
        processor,
        'must be a function (tx, message, context) => Promise<void> (or give handlers: { [type]: handler })',
      );
    return processor as Processor<Sql>;
  }
  if (typeof handlers !== 'object' || handlers === null || Array.isArray(handlers))
    throw new InvalidArgumentError(
      'options.handlers',
      handlers,
      'must be an object { [message type]: handler }',
    );
  const table = new Map<string, Processor<Sql>>();
  for (const [type, handler] of Object.entries(handlers)) {
    if (typeof handler !== 'function')
      throw new InvalidArgumentError(
        `options.handlers[${JSON.stringify(type)}]`,
        handler,
        'must be a function',
      );
    table.set(type, handler as Processor<Sql>);
  }
  if (table.size === 0)
    throw new InvalidArgumentError('options.handlers', handlers, 'must name at least one type');
  const known = [...table.keys()];
  return (tx, message, context) => {
    const handler = table.get(message.type);
    if (!handler) throw new UnknownMessageTypeError(message.type, known);
    return handler(tx, message, context);
  };
}
