import { InvalidArgumentError } from './errors.js';

/** Longest schedule key, prefix, aggregate id or message type, in UTF-16 code units. */
export const MAX_KEY_LENGTH = 512;
/** Largest message once serialised as JSON, in UTF-8 bytes (256 KiB). */
export const MAX_MESSAGE_BYTES = 256 * 1024;

// C0 controls, DEL and C1 controls: invisible in logs and unsafe in most key spaces.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
// An unpaired surrogate cannot be encoded as UTF-8, so no backend could store it faithfully.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function checkText(field: string, value: unknown, what: string, allowEmpty: boolean): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(field, value, `${what} must be a string`);
  if (!allowEmpty && value.length === 0)
    throw new InvalidArgumentError(field, value, `${what} must not be empty`);
  if (value.length > MAX_KEY_LENGTH)
    throw new InvalidArgumentError(field, value, `${what} is longer than ${MAX_KEY_LENGTH} characters`);
  const control = CONTROL.exec(value);
  if (control)
    throw new InvalidArgumentError(
      field,
      value,
      `${what} contains the control character U+${control[0].charCodeAt(0).toString(16).padStart(4, '0').toUpperCase()} at index ${control.index}`,
    );
  if (LONE_SURROGATE.test(value))
    throw new InvalidArgumentError(field, value, `${what} contains an unpaired surrogate`);
  return value;
}

/**
 * Validates a schedule key and returns it unchanged. A key is 1 to 512 characters of valid Unicode text
 * without control characters. Keys are compared and prefixed literally: `a/flow/` never matches `a/flowish`.
 *
 * @example scheduleKey(`order/${orderId}/expire`)
 * @throws {InvalidArgumentError} naming `key` and the value.
 */
export function scheduleKey(text: string, field = 'key'): string {
  return checkText(field, text, 'a schedule key', false);
}

/** Validates a key prefix (may be empty: every key). */
export function schedulePrefix(text: string, field = 'prefix'): string {
  return checkText(field, text, 'a key prefix', true);
}

/** Validates an identifier such as an aggregate id, message type, lease key or schedule id. */
export function identifier(field: string, value: unknown): string {
  return checkText(field, value, 'an identifier', false);
}

/** Validates a Date (a real Date holding a valid time) and returns a copy. */
export function validDate(field: string, value: unknown): Date {
  if (!(value instanceof Date)) throw new InvalidArgumentError(field, value, 'must be a Date');
  const time = value.getTime();
  if (Number.isNaN(time)) throw new InvalidArgumentError(field, value, 'is an invalid Date');
  return new Date(time);
}

/**
 * The longest delay a Node.js timer keeps: 2^31 − 1 ms, about 24.8 days. A longer `setTimeout` fires after
 * 1 ms instead (with a `TimeoutOverflowWarning`), so a duration handed to a timer, to a driver's timeout
 * option or to a server setting in milliseconds is validated with `{ max: MAX_TIMER_MS }`.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/** Validates a duration in milliseconds: a finite number, positive unless `allowZero`, at most `max`. */
export function duration(
  field: string,
  value: unknown,
  options: { allowZero?: boolean; max?: number } = {},
): number {
  if (typeof value !== 'number' || !Number.isFinite(value))
    throw new InvalidArgumentError(field, value, 'must be a finite number of milliseconds');
  if (value < 0 || (value === 0 && !options.allowZero))
    throw new InvalidArgumentError(
      field,
      value,
      options.allowZero ? 'must not be negative' : 'must be positive',
    );
  if (options.max !== undefined && value > options.max)
    throw new InvalidArgumentError(
      field,
      value,
      options.max === MAX_TIMER_MS
        ? `must be at most ${MAX_TIMER_MS} ms (about 24.8 days, the longest timer Node.js keeps)`
        : `must be at most ${options.max}`,
    );
  return value;
}

/** Validates a positive integer count. */
export function positiveInteger(
  field: string,
  value: unknown,
  options: { allowZero?: boolean } = {},
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < (options.allowZero ? 0 : 1))
    throw new InvalidArgumentError(
      field,
      value,
      options.allowZero ? 'must be a non-negative integer' : 'must be a positive integer',
    );
  return value;
}

/**
 * Checks that `value` survives a JSON round trip unchanged: null, booleans, finite numbers, strings,
 * arrays and plain objects. Object properties that are `undefined` are dropped (as JSON does); anything
 * else JSON would change or lose (functions, symbols, bigints, NaN, Infinity, Dates, Maps, class
 * instances, cycles) is rejected with the path to it.
 */
export function assertJson(field: string, value: unknown): void {
  const seen = new Set<object>();
  const visit = (v: unknown, path: string): void => {
    switch (typeof v) {
      case 'string':
        if (LONE_SURROGATE.test(v)) throw new InvalidArgumentError(path, v, 'contains an unpaired surrogate');
        return;
      case 'boolean':
        return;
      case 'number':
        if (!Number.isFinite(v))
          throw new InvalidArgumentError(path, v, 'is not a finite number (JSON cannot hold it)');
        return;
      case 'object': {
        if (v === null) return;
        if (seen.has(v)) throw new InvalidArgumentError(path, '[circular]', 'is a circular reference');
        if (Array.isArray(v)) {
          seen.add(v);
          v.forEach((item, i) => {
            if (item === undefined)
              throw new InvalidArgumentError(`${path}[${i}]`, item, 'is undefined (JSON turns it into null)');
            visit(item, `${path}[${i}]`);
          });
          seen.delete(v);
          return;
        }
        const proto = Object.getPrototypeOf(v);
        if (proto !== Object.prototype && proto !== null)
          throw new InvalidArgumentError(
            path,
            v,
            `is a ${(v as object).constructor?.name ?? 'non-plain object'}, not plain JSON data`,
          );
        seen.add(v);
        for (const [k, item] of Object.entries(v)) {
          if (item === undefined) continue;
          visit(item, `${path}.${k}`);
        }
        seen.delete(v);
        return;
      }
      default:
        throw new InvalidArgumentError(path, v, `is a ${typeof v}, not JSON data`);
    }
  };
  visit(value, field);
}

/**
 * Reads an options argument into a plain object: each own enumerable property is read once, so that
 * later reads see stable values and a getter or `Proxy` trap that throws becomes a typed error instead
 * of escaping raw. `undefined` reads as `{}`.
 *
 * @param field names the argument in errors (`options`, `options.dst`); unknown keys are named
 *   `<field>.<key>`.
 * @param known the accepted keys; anything else is rejected.
 * @param what says what the object holds, for messages (`a parseCron option`, `a DST policy field`).
 * @throws {InvalidArgumentError} when `value` is not a plain object (null, an array, a string, a
 *   function …), has a key outside `known`, or cannot be read.
 */
export function readOptions(
  field: string,
  value: unknown,
  known: ReadonlySet<string>,
  what: string,
): Record<string, unknown> {
  if (value === undefined) return {};
  const list = [...known].join(', ');
  if (typeof value !== 'object' || value === null)
    throw new InvalidArgumentError(field, value, `must be an object (${list})`);
  const copy: Record<string, unknown> = {};
  let key: string | undefined;
  try {
    if (Array.isArray(value))
      throw new InvalidArgumentError(field, value, `must be an object (${list}), not an array`);
    for (key of Object.keys(value)) copy[key] = (value as Record<string, unknown>)[key];
  } catch (error) {
    if (error instanceof InvalidArgumentError) throw error;
    const where = key === undefined ? 'its keys' : `its key ${JSON.stringify(key)}`;
    throw new InvalidArgumentError(field, value, `could not be read (${where} threw: ${errorText(error)})`, {
      cause: error,
    });
  }
  for (const [k, v] of Object.entries(copy))
    if (!known.has(k)) throw new InvalidArgumentError(`${field}.${k}`, v, `is not ${what} (known: ${list})`);
  return copy;
}

function errorText(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return 'an unprintable value';
  }
}
