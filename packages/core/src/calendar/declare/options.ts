import { InvalidArgumentError } from '../../errors.js';
import type { DstPolicy } from '../../time/spec.js';
import {
  between as betweenWindow,
  days as daysWindow,
  lastDayOfMonth,
  unlessBetween as unlessBetweenWindow,
  type Window,
} from '../../time/window.js';
import { duration, identifier, positiveInteger, readOptions } from '../../validate.js';
import type { HandlerContext, Invocation } from '../run/invocation.js';

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
  /**
   * What `withoutOverlap` does with an occurrence that finds the previous run still going: `skip`
   * (default) skips it for good (`overlap_busy`: it never runs later, and the cursor moves past it);
   * `queue` runs it as soon as the previous run ends. At most one occurrence per schedule waits: one
   * that comes while another waits is skipped (`overlap_busy`, detail `a run is already queued`),
   * since the queued run starts after the current one anyway. A queued occurrence holds no concurrency
   * slot while it waits, and is cancelled like one waiting for a slot (`stopped` on drain,
   * `leadership_lost` when leadership ends: the next leader re-examines it). Needs `withoutOverlap: true`.
   */
  onOverlap?: 'skip' | 'queue';
  /** TTL of the overlap lease in ms (default 30,000): how long a crashed holder blocks the schedule. */
  overlapTTL?: number;
  /** Run only in these environments (the scheduler's `environment`); elsewhere the schedule is inactive. */
  environments?: readonly string[];
  /**
   * After downtime or failover, run the most recent `max` (default 10) occurrences missed within
   * `window` ms, oldest first; older ones are recorded as `missed`, the rest of the window as one
   * `backlog_limited` record.
   *
   * A first start (no cursor: a new deployment, a new declaration, a cursor forgotten after `cursorTTL`)
   * has nothing to catch up from and runs nothing due before the scheduler started, unless
   * `onFirstStart: true`: then it runs the most recent `max` occurrences within `window` (`catch_up`),
   * as if the deployment had been down for the whole window, and reports nothing older.
   */
  catchUp?: { window: number; max?: number; onFirstStart?: boolean };
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
  readonly onOverlap: 'skip' | 'queue';
  readonly overlapTTL: number;
  readonly environments?: readonly string[];
  readonly catchUp?: { readonly window: number; readonly max: number; readonly onFirstStart?: true };
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

const KNOWN: ReadonlySet<string> = new Set<string>([
  'timeout',
  'withoutOverlap',
  'onOverlap',
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

/**
 * Reads schedule options into a plain object (each property read once; a throwing getter or `Proxy`
 * trap becomes a typed error), rejecting anything but an object of known options.
 *
 * @throws {InvalidArgumentError} naming `options` or `options.<unknown key>`.
 */
export function readScheduleOptions(given: unknown): Record<string, unknown> {
  return readOptions('options', given, KNOWN, 'a schedule option');
}

const CATCH_UP_FIELDS: ReadonlySet<string> = new Set(['window', 'max', 'onFirstStart']);
const DST_FIELDS: ReadonlySet<string> = new Set(['gap', 'overlap']);

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
  const o = readScheduleOptions(given);

  const timeout = o.timeout === undefined ? undefined : duration('options.timeout', o.timeout);
  const withoutOverlap = optionalBoolean('options.withoutOverlap', o.withoutOverlap);
  const onOverlap = o.onOverlap ?? 'skip';
  if (onOverlap !== 'skip' && onOverlap !== 'queue')
    throw new InvalidArgumentError('options.onOverlap', o.onOverlap, 'must be "skip" or "queue"');
  if (o.onOverlap !== undefined && !withoutOverlap)
    throw new InvalidArgumentError(
      'options.onOverlap',
      o.onOverlap,
      'applies only with withoutOverlap: true (there is no overlap lease to wait for otherwise)',
    );
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
    const c = readOptions('options.catchUp', o.catchUp, CATCH_UP_FIELDS, 'a catchUp field');
    if (c.window === undefined)
      throw new InvalidArgumentError(
        'options.catchUp.window',
        c.window,
        'is required: how far back to catch up, in ms',
      );
    catchUp = Object.freeze({
      window: duration('options.catchUp.window', c.window),
      max: c.max === undefined ? DEFAULT_CATCH_UP_MAX : positiveInteger('options.catchUp.max', c.max),
      ...(optionalBoolean('options.catchUp.onFirstStart', c.onFirstStart)
        ? { onFirstStart: true as const }
        : {}),
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
    dst = Object.freeze(
      readOptions('options.dst', o.dst, DST_FIELDS, 'a DST policy field'),
    ) as Partial<DstPolicy>;
  }

  return Object.freeze({
    ...(timeout !== undefined ? { timeout } : {}),
    withoutOverlap,
    onOverlap,
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

/**
 * A JSON-safe description of the options a declaration sets (functions appear as `true`); defaults are left
 * out, so `{}` means "all defaults".
 */
export function describeOptions(options: NormalizedOptions): Record<string, unknown> {
  return {
    ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
    ...(options.withoutOverlap ? { withoutOverlap: true, overlapTTL: options.overlapTTL } : {}),
    ...(options.onOverlap === 'queue' ? { onOverlap: 'queue' } : {}),
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
