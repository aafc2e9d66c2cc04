import { InvalidArgumentError } from '../errors.js';
import type { DstPolicy } from '../time/spec.js';
import {
  between as betweenWindow,
  days as daysWindow,
  lastDayOfMonth,
  unlessBetween as unlessBetweenWindow,
  type Window,
} from '../time/window.js';
import { duration, identifier, positiveInteger } from '../validate.js';
import type { HandlerContext, Invocation } from './invocation.js';

/** A hook around a run: `before` and `after` the handler. A throw marks the run `hook_failed`. */
export type Hook = (context: HandlerContext) => unknown;

/** Called after a run failed (handler error, hook error or timeout), with the error. Its own errors are logged. */
export type FailedHook = (context: HandlerContext, error: unknown) => unknown;

/** Decides at run time whether an occurrence runs; `false` records it as skipped (`filtered`). */
export type WhenPredicate = (invocation: Invocation) => boolean | Promise<boolean>;

/** Options of a declaration. Every field is optional; see {@link Declaration.with}. */
export interface ScheduleOptions {
  /** Aborts the handler's signal after this many ms and records `failed` / `timed_out`. */
  timeout?: number;
  /**
   * Never run two occurrences of this schedule at once, across replicas and epochs: an overlap lease is
   * held while the handler runs (renewed on its own, independently of leadership), and an occurrence that
   * finds it held is skipped as `overlap_busy`.
   */
  withoutOverlap?: boolean;
  /** TTL of the overlap lease in ms (default 30,000): how long a crashed holder blocks the schedule. */
  overlapTTL?: number;
  /** Run only in these environments (the scheduler's `environment`); elsewhere the schedule is inactive. */
  environments?: readonly string[];
  /**
   * After downtime or failover, run the most recent `max` (default 10) occurrences missed within
   * `window` ms, oldest first; older ones are recorded as `missed`, the rest of the window as one
   * `backlog_limited` record.
   */
  catchUp?: { window: number; max?: number };
  /** Only on these weekdays: a `days(...)` window or a list (`['MON', 'FRI']`, `[1, 5]`). Silent filter. */
  days?: Window | ReadonlyArray<number | string>;
  /** Only inside (or outside) a time-of-day window: `between('09:00', '17:00')`, `unlessBetween(...)`, or `['09:00', '17:00']`. Silent filter. */
  between?: Window | readonly [string, string];
  /** Only outside a time-of-day window (which may wrap midnight): `['22:00', '06:00']`. Silent filter. */
  unlessBetween?: Window | readonly [string, string];
  /** Only on the last day of the month. Silent filter. */
  lastDayOfMonth?: boolean;
  /** Checked just before running; `false` skips the occurrence as `filtered`. */
  when?: WhenPredicate;
  /** Run even while the scheduler's `maintenance` says the application is in maintenance. */
  evenInMaintenanceMode?: boolean;
  before?: Hook;
  after?: Hook;
  failed?: FailedHook;
  /** DST policy of a cron declaration (gap: skip | shift, overlap: both | first | last). */
  dst?: Partial<DstPolicy>;
}

/** Options after validation: windows collected, defaults applied where they do not depend on the scheduler. */
export interface NormalizedOptions {
  readonly timeout?: number;
  readonly withoutOverlap: boolean;
  readonly overlapTTL: number;
  readonly environments?: readonly string[];
  readonly catchUp?: { readonly window: number; readonly max: number };
  readonly windows: readonly Window[];
  readonly when?: WhenPredicate;
  readonly evenInMaintenanceMode: boolean;
  readonly before?: Hook;
  readonly after?: Hook;
  readonly failed?: FailedHook;
  readonly dst?: Partial<DstPolicy>;
  /** The options as given (merged over `with` calls), for further merging. */
  readonly given: Readonly<ScheduleOptions>;
}

export const DEFAULT_OVERLAP_TTL = 30_000;
export const DEFAULT_CATCH_UP_MAX = 10;

const KNOWN = new Set<string>([
  'timeout',
  'withoutOverlap',
  'overlapTTL',
  'environments',
  'catchUp',
  'days',
  'between',
  'unlessBetween',
  'lastDayOfMonth',
  'when',
  'evenInMaintenanceMode',
  'before',
  'after',
  'failed',
  'dst',
]);

function isWindow(value: unknown): value is Window {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Window).allows === 'function' &&
    typeof (value as Window).describe === 'function'
  );
}

/** A window option given as a Window or as a `[from, to]` pair of `HH:MM` times. */
function timeWindow(
  name: 'between' | 'unlessBetween',
  value: unknown,
  make: (from: string, to: string) => Window,
): Window {
  if (isWindow(value)) return value;
  if (Array.isArray(value) && value.length === 2) {
    const [from, to] = value as unknown[];
    if (typeof from !== 'string')
      throw new InvalidArgumentError(`options.${name}[0]`, from, 'must be a wall-clock time "HH:MM"');
    if (typeof to !== 'string')
      throw new InvalidArgumentError(`options.${name}[1]`, to, 'must be a wall-clock time "HH:MM"');
    return make(from, to);
  }
  throw new InvalidArgumentError(
    `options.${name}`,
    value,
    `must be a time window: ${name}('09:00', '17:00') or ['09:00', '17:00']`,
  );
}

function optionalFunction<T>(field: string, value: unknown): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw new InvalidArgumentError(field, value, 'must be a function');
  return value as T;
}

function optionalBoolean(field: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new InvalidArgumentError(field, value, 'must be true or false');
  return value;
}

/**
 * Validates declaration options (naming `options.<field>` and the value in errors) and normalises them.
 * `isCron` says whether a `dst` policy applies.
 */
export function normalizeOptions(given: unknown, isCron: boolean): NormalizedOptions {
  if (given === undefined) given = {};
  if (typeof given !== 'object' || given === null || Array.isArray(given))
    throw new InvalidArgumentError('options', given, 'must be an object of schedule options');
  const o = given as Record<string, unknown>;
  for (const key of Object.keys(o))
    if (!KNOWN.has(key))
      throw new InvalidArgumentError(
        `options.${key}`,
        o[key],
        `is not a schedule option (known: ${[...KNOWN].join(', ')})`,
      );

  const timeout = o.timeout === undefined ? undefined : duration('options.timeout', o.timeout);
  const withoutOverlap = optionalBoolean('options.withoutOverlap', o.withoutOverlap);
  const overlapTTL =
    o.overlapTTL === undefined ? DEFAULT_OVERLAP_TTL : duration('options.overlapTTL', o.overlapTTL);

  let environments: readonly string[] | undefined;
  if (o.environments !== undefined) {
    if (!Array.isArray(o.environments) || o.environments.length === 0)
      throw new InvalidArgumentError(
        'options.environments',
        o.environments,
        'must be a non-empty array of names',
      );
    environments = Object.freeze(o.environments.map((e, i) => identifier(`options.environments[${i}]`, e)));
  }

  let catchUp: NormalizedOptions['catchUp'];
  if (o.catchUp !== undefined) {
    const c = o.catchUp as Record<string, unknown>;
    if (typeof c !== 'object' || c === null)
      throw new InvalidArgumentError('options.catchUp', o.catchUp, 'must be an object { window, max? }');
    if (c.window === undefined)
      throw new InvalidArgumentError(
        'options.catchUp.window',
        c.window,
        'is required: how far back to catch up, in ms',
      );
    catchUp = Object.freeze({
      window: duration('options.catchUp.window', c.window),
      max: c.max === undefined ? DEFAULT_CATCH_UP_MAX : positiveInteger('options.catchUp.max', c.max),
    });
  }

  const windows: Window[] = [];
  if (o.days !== undefined) {
    if (isWindow(o.days)) windows.push(o.days);
    else if (Array.isArray(o.days)) windows.push(daysWindow(...(o.days as Array<number | string>)));
    else
      throw new InvalidArgumentError(
        'options.days',
        o.days,
        "must be days('MON', ...) or a list of weekdays",
      );
  }
  if (o.between !== undefined) windows.push(timeWindow('between', o.between, betweenWindow));
  if (o.unlessBetween !== undefined)
    windows.push(timeWindow('unlessBetween', o.unlessBetween, unlessBetweenWindow));
  if (optionalBoolean('options.lastDayOfMonth', o.lastDayOfMonth)) windows.push(lastDayOfMonth);

  let dst: Partial<DstPolicy> | undefined;
  if (o.dst !== undefined) {
    if (!isCron)
      throw new InvalidArgumentError(
        'options.dst',
        o.dst,
        'applies only to cron declarations (intervals ignore DST)',
      );
    if (typeof o.dst !== 'object' || o.dst === null)
      throw new InvalidArgumentError('options.dst', o.dst, 'must be an object { gap?, overlap? }');
    dst = Object.freeze({ ...(o.dst as Partial<DstPolicy>) });
  }

  return Object.freeze({
    ...(timeout !== undefined ? { timeout } : {}),
    withoutOverlap,
    overlapTTL,
    ...(environments ? { environments } : {}),
    ...(catchUp ? { catchUp } : {}),
    windows: Object.freeze(windows),
    ...optionalEntry('when', optionalFunction<WhenPredicate>('options.when', o.when)),
    evenInMaintenanceMode: optionalBoolean('options.evenInMaintenanceMode', o.evenInMaintenanceMode),
    ...optionalEntry('before', optionalFunction<Hook>('options.before', o.before)),
    ...optionalEntry('after', optionalFunction<Hook>('options.after', o.after)),
    ...optionalEntry('failed', optionalFunction<FailedHook>('options.failed', o.failed)),
    ...(dst ? { dst } : {}),
    given: Object.freeze({ ...(o as ScheduleOptions) }),
  });
}

function optionalEntry<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

/** A JSON-safe description of normalised options (functions appear as `true`). */
export function describeOptions(options: NormalizedOptions): Record<string, unknown> {
  return {
    ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
    withoutOverlap: options.withoutOverlap,
    ...(options.withoutOverlap ? { overlapTTL: options.overlapTTL } : {}),
    ...(options.environments ? { environments: [...options.environments] } : {}),
    ...(options.catchUp ? { catchUp: { ...options.catchUp } } : {}),
    ...(options.windows.length > 0 ? { windows: options.windows.map((w) => w.describe()) } : {}),
    ...(options.when ? { when: true } : {}),
    ...(options.evenInMaintenanceMode ? { evenInMaintenanceMode: true } : {}),
    ...(options.before || options.after || options.failed
      ? {
          hooks: [
            ...(options.before ? ['before'] : []),
            ...(options.after ? ['after'] : []),
            ...(options.failed ? ['failed'] : []),
          ],
        }
      : {}),
    ...(options.dst ? { dst: { ...options.dst } } : {}),
  };
}
