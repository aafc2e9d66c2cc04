import { InvalidArgumentError } from '../../errors.js';
import { parseCron } from '../../time/cron-spec.js';
import { interval } from '../../time/interval.js';
import type { Spec, SpecDescription } from '../../time/spec.js';
import { parseTimeOfDay, type TimeOfDay } from '../../time/window.js';
import { validateZone } from '../../time/zone.js';
import { duration, identifier } from '../../validate.js';
import type { Handler } from '../run/invocation.js';
import {
  describeOptions,
  type NormalizedOptions,
  normalizeOptions,
  readScheduleOptions,
  type ScheduleOptions,
} from './options.js';

/** Longest schedule id: leaves room for the group and namespace in lease and cursor keys. */
export const MAX_SCHEDULE_ID_LENGTH = 200;

/** Where a declaration's spec came from (a cron spec is re-parsed when `with({ dst })` changes its policy). */
export type DeclarationSource =
  | { readonly kind: 'cron'; readonly expression: string; readonly zone: string }
  | { readonly kind: 'interval'; readonly every: number }
  | { readonly kind: 'spec' };

/** A JSON-safe description of a declaration (no callbacks). */
export interface DeclarationDescription {
  id: string;
  kind: DeclarationSource['kind'];
  spec: SpecDescription;
  options: Record<string, unknown>;
}

const creating = Symbol('Declaration.create');

/**
 * One schedule: an id, when it runs (a {@link Spec}), what it runs and how. Immutable; made by
 * {@link calendar}, {@link cron}, {@link every} or {@link define}, refined with {@link Declaration.with}.
 * Declaring does no I/O: it only validates, so a bad declaration fails at module load.
 */
export class Declaration {
  readonly id: string;
  readonly spec: Spec;
  readonly handler: Handler;
  readonly options: NormalizedOptions;
  readonly source: DeclarationSource;

  /** Use {@link calendar}, {@link cron}, {@link every} or {@link define}. */
  constructor(
    token: typeof creating,
    id: string,
    source: DeclarationSource,
    spec: Spec,
    handler: Handler,
    options: NormalizedOptions,
  ) {
    if (token !== creating)
      throw new InvalidArgumentError(
        'Declaration',
        token,
        'is made with calendar(), cron(), every() or define()',
      );
    this.id = id;
    this.source = source;
    this.spec = spec;
    this.handler = handler;
    this.options = options;
    Object.freeze(this);
  }

  /**
   * A copy with more options; later values win (`timeout`, `catchUp`, hooks …).
   *
   * @throws {InvalidArgumentError} naming `options.<field>` and the value.
   */
  with(options: ScheduleOptions): Declaration {
    if (options === undefined)
      throw new InvalidArgumentError('options', options, 'must be an object of schedule options');
    const more = readScheduleOptions(options);
    return build(this.id, this.source, this.spec, this.handler, { ...this.options.given, ...more });
  }

  /** A JSON-safe description. */
  describe(): DeclarationDescription {
    return {
      id: this.id,
      kind: this.source.kind,
      spec: this.spec.describe(),
      options: describeOptions(this.options),
    };
  }

  toJSON(): DeclarationDescription {
    return this.describe();
  }

  toString(): string {
    return `${this.id} (${this.spec.toString()})`;
  }
}

function scheduleId(id: unknown): string {
  identifier('id', id);
  if ((id as string).length > MAX_SCHEDULE_ID_LENGTH)
    throw new InvalidArgumentError('id', id, `must be at most ${MAX_SCHEDULE_ID_LENGTH} characters`);
  return id as string;
}

function checkHandler(handler: unknown): Handler {
  if (typeof handler !== 'function')
    throw new InvalidArgumentError('handler', handler, 'must be a function ({ signal, invocation }) => ...');
  return handler as Handler;
}

function build(
  id: string,
  source: DeclarationSource,
  spec: Spec,
  handler: Handler,
  given: ScheduleOptions | undefined,
): Declaration {
  const options = normalizeOptions(given, source.kind === 'cron');
  let finalSpec = spec;
  if (source.kind === 'cron' && options.dst !== undefined)
    finalSpec = parseCron(source.expression, source.zone, { dst: options.dst });
  return new Declaration(creating, id, source, finalSpec, handler, options);
}

function cronDeclaration(
  id: unknown,
  expression: unknown,
  zone: string,
  handler: unknown,
  options: ScheduleOptions | undefined,
): Declaration {
  const checkedId = scheduleId(id);
  const checkedHandler = checkHandler(handler);
  if (typeof expression !== 'string')
    throw new InvalidArgumentError('expression', expression, 'must be a cron expression string');
  const given = readScheduleOptions(options) as ScheduleOptions;
  const spec = parseCron(expression, zone, given.dst === undefined ? {} : { dst: given.dst });
  return build(
    checkedId,
    Object.freeze({ kind: 'cron', expression: expression.trim(), zone }),
    spec,
    checkedHandler,
    given,
  );
}

function timeFields(time: TimeOfDay): string {
  return time.second === 0 ? `${time.minute} ${time.hour}` : `${time.second} ${time.minute} ${time.hour}`;
}

/**
 * Declarations in one IANA zone: `calendar('Europe/Berlin').dailyAt('report', '09:00', handler)`.
 * Immutable; `in(zone)` gives the same builder in another zone.
 */
export class Calendar {
  readonly zone: string;

  /** Use {@link calendar}. */
  constructor(zone: string) {
    this.zone = validateZone(zone, 'zone');
    Object.freeze(this);
  }

  /** The same builder in another zone. */
  in(zone: string): Calendar {
    return new Calendar(zone);
  }

  /** A cron expression (5 fields, or 6 with seconds first; `@daily` and friends) on this zone's wall clock. */
  cron(id: string, expression: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return cronDeclaration(id, expression, this.zone, handler, options);
  }

  /** Every day at `HH:MM` (or `HH:MM:SS`) wall-clock time. */
  dailyAt(id: string, time: string, handler: Handler, options?: ScheduleOptions): Declaration {
    scheduleId(id);
    const at = parseTimeOfDay(time, 'time');
    const fields = timeFields(at);
    return cronDeclaration(id, `${fields} * * *`, this.zone, handler, options);
  }

  /** On the last day of every month at `HH:MM` (or `HH:MM:SS`). */
  lastDayOfMonthAt(id: string, time: string, handler: Handler, options?: ScheduleOptions): Declaration {
    scheduleId(id);
    const at = parseTimeOfDay(time, 'time');
    return cronDeclaration(id, `${timeFields(at)} L * *`, this.zone, handler, options);
  }

  /** Every day at midnight. */
  daily(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '0 0 * * *', handler, options);
  }

  /** Every hour on the hour. */
  hourly(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '0 * * * *', handler, options);
  }

  /** Every Sunday at midnight. */
  weekly(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '0 0 * * 0', handler, options);
  }

  /** The first day of every month at midnight. */
  monthly(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '0 0 1 * *', handler, options);
  }

  everyMinute(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '* * * * *', handler, options);
  }

  everyFiveMinutes(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '*/5 * * * *', handler, options);
  }

  everyTenMinutes(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '*/10 * * * *', handler, options);
  }

  everyFifteenMinutes(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '*/15 * * * *', handler, options);
  }

  everyThirtyMinutes(id: string, handler: Handler, options?: ScheduleOptions): Declaration {
    return this.cron(id, '*/30 * * * *', handler, options);
  }
}

/**
 * A declaration builder for an IANA zone (required: the host's zone never leaks in).
 *
 * @example calendar('Europe/Berlin').dailyAt('report', '09:00', sendReport).with({ catchUp: { window: 3_600_000 } })
 * @throws {InvalidZoneError} naming `zone`.
 */
export function calendar(zone: string): Calendar {
  return new Calendar(zone);
}

/**
 * A cron declaration: `cron('cleanup', '*​/15 * * * *', 'UTC', handler)`.
 *
 * @throws {CronSyntaxError} for a bad expression, {@link InvalidZoneError} for a bad zone,
 *   {@link InvalidArgumentError} for a bad id, handler or option.
 */
export function cron(
  id: string,
  expression: string,
  zone: string,
  handler: Handler,
  options?: ScheduleOptions,
): Declaration {
  scheduleId(id);
  return cronDeclaration(id, expression, validateZone(zone, 'zone'), handler, options);
}

/**
 * Every `ms` milliseconds of elapsed time, on a grid aligned to the Unix epoch (`every('poll', 30_000, h)`
 * runs at :00 and :30 of every UTC minute). Ignores DST.
 *
 * @throws {InvalidArgumentError} naming `every` for a zero, negative or fractional duration.
 */
export function every(id: string, ms: number, handler: Handler, options?: ScheduleOptions): Declaration {
  const checkedId = scheduleId(id);
  const checkedHandler = checkHandler(handler);
  const every = duration('every', ms);
  if (!Number.isInteger(every))
    throw new InvalidArgumentError('every', ms, 'must be a whole number of milliseconds');
  return build(
    checkedId,
    Object.freeze({ kind: 'interval', every }),
    interval(every),
    checkedHandler,
    options,
  );
}

/**
 * A declaration on any {@link Spec}: `define('sync', intervalFrom(3_600_000, anchor), handler)`.
 *
 * @throws {InvalidArgumentError} naming `spec` when it does not implement `next`, `prev`, `occurrences`.
 */
export function define(id: string, spec: Spec, handler: Handler, options?: ScheduleOptions): Declaration {
  const checkedId = scheduleId(id);
  const s = spec as Partial<Spec> | null;
  if (
    typeof s !== 'object' ||
    s === null ||
    typeof s.next !== 'function' ||
    typeof s.prev !== 'function' ||
    typeof s.occurrences !== 'function' ||
    typeof s.describe !== 'function' ||
    typeof s.timeZone !== 'string'
  )
    throw new InvalidArgumentError(
      'spec',
      spec,
      'must be a Spec (next, prev, occurrences, describe, timeZone), e.g. from parseCron() or interval()',
    );
  return build(checkedId, Object.freeze({ kind: 'spec' }), spec, checkHandler(handler), options);
}
