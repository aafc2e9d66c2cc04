import type { Clock } from '../clock.js';
import { systemClock } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import { defaultLogger, type Logger } from '../logger.js';
import { duration, MAX_TIMER_MS } from '../validate.js';

/**
 * What every backend factory reads the same way: the options object itself, its `clock` and `logger`,
 * options renamed to the `…Ms` convention (the old name still works for one minor version, with a
 * deprecation warning through the logger), and durations in milliseconds.
 */

/** `old name → new name` for options renamed in this minor version. */
export type OptionRenames = Readonly<Record<string, string>>;

export interface ReadOptionsSpec {
  /** Names the factory in deprecation warnings, e.g. `createRedisBackend`. */
  factory: string;
  /** Options renamed: the old name is read as the new one, with a warning. */
  renamed?: OptionRenames;
  /** Prefix of field names in errors (default `options`). */
  field?: string;
}

/** The options a factory received, checked, with renamed ones under their new names. */
export interface FactoryOptions<T> {
  /** The options under their current names (a copy; the caller's object is not changed). */
  options: T;
  clock: Clock;
  logger: Logger;
}

/**
 * Checks a factory's options: a plain object (or undefined), a `clock` with `now()` and `setTimer()`, a
 * `logger` with the four levels. Renamed options given under their old name are moved to the new one and
 * reported with `logger.warn` (once per call); giving both names is refused.
 *
 * @throws {InvalidArgumentError} naming `options.<name>` and the value.
 */
export function readFactoryOptions<T extends { clock?: Clock; logger?: Logger }>(
  value: T | undefined,
  spec: ReadOptionsSpec,
): FactoryOptions<T> {
  const field = spec.field ?? 'options';
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value)))
    throw new InvalidArgumentError(field, value, 'must be an object of options');
  const options = { ...(value ?? {}) } as T & Record<string, unknown>;
  const logger = checkLogger(options.logger ?? defaultLogger, `${field}.logger`);
  const clock = checkClock(options.clock ?? systemClock, `${field}.clock`);
  for (const [from, to] of Object.entries(spec.renamed ?? {})) {
    if (options[from] === undefined) continue;
    if (options[to] !== undefined)
      throw new InvalidArgumentError(
        `${field}.${from}`,
        options[from],
        `is the old name of ${field}.${to}; give only ${to}`,
      );
    logger.warn(
      `${spec.factory}: ${field}.${from} is deprecated and will be removed in the next minor version; use ${field}.${to}`,
      { option: from, replacement: to },
    );
    options[to as keyof typeof options] = options[from] as never;
    delete options[from];
  }
  return { options, clock, logger };
}

/** Checks a Logger (`debug`, `info`, `warn`, `error` functions). */
export function checkLogger(value: unknown, field = 'options.logger'): Logger {
  for (const level of ['debug', 'info', 'warn', 'error'] as const)
    if (typeof (value as Partial<Logger> | null)?.[level] !== 'function')
      throw new InvalidArgumentError(
        field,
        value,
        `must be a Logger { debug, info, warn, error } (no ${level})`,
      );
  return value as Logger;
}

/** Checks a Clock (`now()` and `setTimer()`). */
export function checkClock(value: unknown, field = 'options.clock'): Clock {
  const clock = value as Partial<Clock> | null;
  if (typeof clock?.now !== 'function' || typeof clock.setTimer !== 'function')
    throw new InvalidArgumentError(field, value, 'must be a Clock { now(), setTimer() }');
  return value as Clock;
}

/**
 * An optional duration in milliseconds: `fallback` when undefined, else a finite number, positive
 * unless `allowZero`, at most `max` (default {@link MAX_TIMER_MS}: the value reaches a timer).
 */
export function durationOption(
  field: string,
  value: unknown,
  fallback: number,
  options: { allowZero?: boolean; max?: number } = {},
): number {
  if (value === undefined) return fallback;
  return duration(field, value, { max: MAX_TIMER_MS, ...options });
}

/** An optional boolean: `fallback` when undefined. */
export function booleanOption(field: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidArgumentError(field, value, 'must be true or false');
  return value;
}
