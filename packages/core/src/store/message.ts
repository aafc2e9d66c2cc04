import { InvalidArgumentError } from '../errors.js';
import { assertJson, identifier, MAX_MESSAGE_BYTES } from '../validate.js';
import type { Message, MessageTrace } from './types.js';

/** Most entries of `Message.trace`, and the longest name and value of one. */
export const MAX_TRACE_ENTRIES = 8;
const MAX_TRACE_NAME = 64;
const MAX_TRACE_VALUE = 512;
const TRACE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const PRINTABLE = /^[\x20-\x7e]*$/;

/** Checks a `Message.trace` (propagation fields) and returns a copy. */
export function validTrace(trace: unknown, field = 'message.trace'): MessageTrace {
  if (typeof trace !== 'object' || trace === null || Array.isArray(trace))
    throw new InvalidArgumentError(field, trace, 'must be an object of strings { traceparent, tracestate? }');
  const entries = Object.entries(trace);
  if (entries.length > MAX_TRACE_ENTRIES)
    throw new InvalidArgumentError(field, trace, `must have at most ${MAX_TRACE_ENTRIES} entries`);
  const copy: Record<string, string> = {};
  for (const [name, value] of entries) {
    if (name.length > MAX_TRACE_NAME || !TRACE_NAME.test(name))
      throw new InvalidArgumentError(
        `${field} name`,
        name,
        `must be 1 to ${MAX_TRACE_NAME} letters, digits, '_', '.' or '-'`,
      );
    if (typeof value !== 'string' || value.length > MAX_TRACE_VALUE || !PRINTABLE.test(value))
      throw new InvalidArgumentError(
        `${field}.${name}`,
        value,
        `must be a string of at most ${MAX_TRACE_VALUE} printable ASCII characters`,
      );
    copy[name] = value;
  }
  return copy;
}

/** Checks a message and returns a detached copy (what gets stored). */
export function validMessage(message: unknown, field = 'message'): Message {
  if (typeof message !== 'object' || message === null || Array.isArray(message))
    throw new InvalidArgumentError(field, message, 'must be an object { type, aggregateId?, data? }');
  const m = message as Record<string, unknown>;
  identifier(`${field}.type`, m.type);
  if (m.aggregateId !== undefined) identifier(`${field}.aggregateId`, m.aggregateId);
  if (m.data !== undefined) assertJson(`${field}.data`, m.data);
  const copy: Message = { type: m.type as string };
  if (m.aggregateId !== undefined) copy.aggregateId = m.aggregateId as string;
  if (m.data !== undefined) copy.data = JSON.parse(JSON.stringify(m.data));
  if (m.trace !== undefined) copy.trace = validTrace(m.trace, `${field}.trace`);
  const bytes = Buffer.byteLength(JSON.stringify(copy));
  if (bytes > MAX_MESSAGE_BYTES)
    throw new InvalidArgumentError(
      field,
      `${bytes} bytes`,
      `serialises to more than ${MAX_MESSAGE_BYTES} bytes`,
    );
  return copy;
}
