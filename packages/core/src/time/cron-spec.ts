import { InvalidArgumentError } from '../errors.js';
import { readOptions } from '../validate.js';
import { type CronFields, type DayRule, parseCronFields } from './cron-fields.js';
import { CronMatcher } from './cron-matcher.js';
import { checkEpochMs, instantOf } from './instant.js';
import { DEFAULT_DST_POLICY, type DstPolicy, type Spec, type SpecDescription } from './spec.js';
import { type OffsetSegment, type ZoneOffsets, zoneOffsets } from './zone.js';

/** Options of {@link parseCron}. */
export interface ParseCronOptions {
  /** What to do with local times that DST removes or repeats; missing parts take {@link DEFAULT_DST_POLICY}. */
  dst?: Partial<DstPolicy>;
}

/** The JSON-safe description of a cron spec. */
export interface CronSpecDescription extends SpecDescription {
  kind: 'cron';
  dst: DstPolicy;
  dayRule: DayRule;
  fields: {
    second: number[];
    minute: number[];
    hour: number[];
    dayOfMonth: Array<number | 'L'>;
    month: number[];
    dayOfWeek: number[];
  };
}

const MS_PER_SECOND = 1000;

/** Earliest and latest instants the engine answers for: years 1 to 9999. */
export const MIN_INSTANT_MS = -62_135_596_800_000;
export const MAX_INSTANT_MS = 253_402_300_799_999;
/** A search walks at most this far from its starting instant (a bit over the matcher's own horizon). */
const WALK_LIMIT_MS = 401 * 366 * 86_400_000;

/**
 * Parses a cron expression evaluated on the wall clock of an IANA zone.
 *
 * 5 fields (`minute hour day-of-month month day-of-week`) or 6 with seconds first; names (`JAN`, `MON`),
 * lists, ranges, steps (`*​/n`, `a-b/n`, `a/n`), `7` as Sunday, `L` (last day of the month) and the `@yearly`,
 * `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly` macros. Day-of-month and day-of-week
 * combine with OR when both are restricted; a field starting with `*` counts as unrestricted (then AND).
 *
 * @param zone an IANA zone (`Europe/Berlin`, `UTC`); `local` and unknown zones are rejected.
 * @throws {CronSyntaxError} for a malformed or never-matching expression, naming field, value and reason.
 * @throws {InvalidZoneError} for a missing or unknown zone.
 * @throws {InvalidArgumentError} for options that are not an object of known options (`null`, a string,
 *   `{ dts: … }`), a malformed DST policy (`options.dst`, `options.dst.gap`, `options.dst.overlap`), or
 *   options that throw when read (a getter or `Proxy` trap), naming the field and the value.
 * @example parseCron('0 9 * * MON-FRI', 'Europe/Berlin').next(new Date())
 */
export function parseCron(expression: string, zone: string, options?: ParseCronOptions): CronSpec {
  const fields = parseCronFields(expression);
  const offsets = zoneOffsets(zone, 'zone');
  const given = readOptions('options', options, PARSE_CRON_OPTIONS, 'a parseCron option');
  const dst = dstPolicy(given.dst);
  return new CronSpec(expression.trim(), fields, offsets, dst);
}

const PARSE_CRON_OPTIONS: ReadonlySet<string> = new Set(['dst']);
const DST_FIELDS: ReadonlySet<string> = new Set(['gap', 'overlap']);

/** Reads a DST policy (`options.dst`); missing parts take {@link DEFAULT_DST_POLICY}. */
export function dstPolicy(given: unknown, field = 'options.dst'): DstPolicy {
  if (given === undefined) return DEFAULT_DST_POLICY;
  const policy = readOptions(field, given, DST_FIELDS, 'a DST policy field');
  const { gap = DEFAULT_DST_POLICY.gap, overlap = DEFAULT_DST_POLICY.overlap } = policy;
  if (gap !== 'skip' && gap !== 'shift')
    throw new InvalidArgumentError(`${field}.gap`, gap, 'must be "skip" or "shift"');
  if (overlap !== 'both' && overlap !== 'first' && overlap !== 'last')
    throw new InvalidArgumentError(`${field}.overlap`, overlap, 'must be "both", "first" or "last"');
  return Object.freeze({ gap, overlap });
}

/** Something that steps through instants in epoch milliseconds (NaN: no more). */
export interface MsStepper {
  nextMs(afterMs: number): number;
}

/** Lazily yields the occurrences in `[startMs, endMs)`; the arguments were validated by the caller. */
export function* occurrencesOf(spec: MsStepper, startMs: number, endMs: number): Generator<Date> {
  let at = startMs - 1;
  for (;;) {
    at = spec.nextMs(at);
    if (Number.isNaN(at) || at >= endMs) return;
    yield new Date(at);
  }
}

/**
 * A cron expression in a zone. Immutable (its scratch state is private and never observable).
 *
 * The zone's timeline is a sequence of constant-offset segments. Inside one segment wall-clock time runs
 * in step with UTC, so the matches of the segment are the cron matches in its range of local times, each
 * mapped back by the segment's offset. A local time in a gap belongs to no segment (skipped); one in an
 * overlap belongs to two (fires twice). The DST policy then trims or adds at the segment edges:
 * `overlap: 'first'` drops the repeated local times from the segment after a fall-back, `'last'` from the
 * one before it, and `gap: 'shift'` adds the first instant after a gap when the gap swallowed a match.
 */
export class CronSpec implements Spec {
  readonly timeZone: string;
  readonly dst: DstPolicy;
  readonly #expression: string;
  readonly #fields: CronFields;
  readonly #matcher: CronMatcher;
  readonly #offsets: ZoneOffsets;
  readonly #segment: OffsetSegment = { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 };
  readonly #shift: boolean;
  readonly #first: boolean;
  readonly #last: boolean;

  /** Use {@link parseCron}. */
  constructor(expression: string, fields: CronFields, offsets: ZoneOffsets, dst: DstPolicy) {
    this.#expression = expression;
    this.#fields = fields;
    this.#matcher = new CronMatcher(fields);
    this.#offsets = offsets;
    this.timeZone = offsets.zone;
    this.dst = dst;
    this.#shift = dst.gap === 'shift';
    this.#first = dst.overlap === 'first';
    this.#last = dst.overlap === 'last';
    Object.freeze(this);
  }

  next(after: Date): Date | undefined {
    const ms = this.nextMs(instantOf('after', after));
    return Number.isNaN(ms) ? undefined : new Date(ms);
  }

  prev(before: Date): Date | undefined {
    const ms = this.prevMs(instantOf('before', before));
    return Number.isNaN(ms) ? undefined : new Date(ms);
  }

  /**
   * {@link next} on epoch milliseconds; NaN when there is none.
   *
   * A NaN (or non-number) argument is an error, not an answer: NaN is this method's way of saying "no
   * occurrence", and a NaN instant always means a bug upstream (an invalid `Date`, arithmetic on
   * `undefined`); answering NaN would turn that bug into a schedule that silently never fires again.
   * `-Infinity` and `Infinity` are accepted (before and after every occurrence).
   *
   * @throws {InvalidArgumentError} naming `afterMs` when it is not a number or is NaN.
   */
  nextMs(afterMs: number): number {
    checkEpochMs('afterMs', afterMs);
    if (afterMs >= MAX_INSTANT_MS) return Number.NaN;
    const from = Math.max(afterMs + 1, MIN_INSTANT_MS);
    const limit = Math.min(from + WALK_LIMIT_MS, MAX_INSTANT_MS + 1);
    const matcher = this.#matcher;
    const seg = this.#offsets.segmentAt(from, this.#segment);
    for (;;) {
      const { start, end, offset } = seg;
      // A gap ends where this segment starts: with `shift`, a match swallowed by it fires at `start`.
      if (this.#shift && seg.offsetBefore < offset && start >= from) {
        const swallowed = matcher.next(Math.ceil((start + seg.offsetBefore) / MS_PER_SECOND));
        if (swallowed * MS_PER_SECOND < start + offset) return start;
      }
      let lo = Math.max(start, from) + offset;
      let hi = end + offset;
      // Overlap before this segment: its first local times were already lived through.
      if (this.#first && seg.offsetBefore > offset) lo = Math.max(lo, start + seg.offsetBefore);
      // Overlap after this segment: its last local times come again, and only the repeat counts.
      if (this.#last && seg.offsetAfter < offset) hi = Math.min(hi, end + seg.offsetAfter);
      if (lo < hi) {
        const match = matcher.next(Math.ceil(lo / MS_PER_SECOND));
        if (Number.isNaN(match)) return Number.NaN;
        const local = match * MS_PER_SECOND;
        if (local < hi) {
          const instant = local - offset;
          return instant <= MAX_INSTANT_MS ? instant : Number.NaN;
        }
      }
      // Written so that a NaN bound ends the search too (every comparison with NaN is false).
      if (!(end < limit)) return Number.NaN;
      this.#offsets.segmentAt(end, seg);
    }
  }

  /**
   * {@link prev} on epoch milliseconds; NaN when there is none. See {@link nextMs} on why a NaN argument
   * throws.
   *
   * @throws {InvalidArgumentError} naming `beforeMs` when it is not a number or is NaN.
   */
  prevMs(beforeMs: number): number {
    checkEpochMs('beforeMs', beforeMs);
    if (beforeMs <= MIN_INSTANT_MS) return Number.NaN;
    const upTo = Math.min(beforeMs - 1, MAX_INSTANT_MS);
    const limit = Math.max(upTo - WALK_LIMIT_MS, MIN_INSTANT_MS);
    const matcher = this.#matcher;
    const seg = this.#offsets.segmentAt(upTo, this.#segment);
    for (;;) {
      const { start, end, offset } = seg;
      let hi = Math.min(end - 1, upTo) + offset;
      let lo = start + offset;
      if (this.#first && seg.offsetBefore > offset) lo = Math.max(lo, start + seg.offsetBefore);
      if (this.#last && seg.offsetAfter < offset) hi = Math.min(hi, end + seg.offsetAfter - 1);
      if (lo <= hi) {
        const match = matcher.prev(Math.floor(hi / MS_PER_SECOND));
        if (Number.isNaN(match)) return Number.NaN;
        const local = match * MS_PER_SECOND;
        if (local >= lo) {
          const instant = local - offset;
          return instant >= MIN_INSTANT_MS ? instant : Number.NaN;
        }
      }
      if (this.#shift && seg.offsetBefore < offset) {
        const swallowed = matcher.next(Math.ceil((start + seg.offsetBefore) / MS_PER_SECOND));
        if (swallowed * MS_PER_SECOND < start + offset) return start;
      }
      if (!(start > limit)) return Number.NaN;
      this.#offsets.segmentAt(start - 1, seg);
    }
  }

  occurrences(from: Date, to: Date): Iterable<Date> {
    const start = instantOf('from', from);
    const end = instantOf('to', to);
    return occurrencesOf(this, start, end);
  }

  toString(): string {
    return this.#expression;
  }

  describe(): CronSpecDescription {
    const f = this.#fields;
    return {
      kind: 'cron',
      expression: this.#expression,
      timeZone: this.timeZone,
      dst: { gap: this.dst.gap, overlap: this.dst.overlap },
      dayRule: f.dayRule,
      fields: {
        second: [...f.seconds],
        minute: [...f.minutes],
        hour: [...f.hours],
        dayOfMonth: f.lastDayOfMonth ? [...f.daysOfMonth, 'L'] : [...f.daysOfMonth],
        month: [...f.months],
        dayOfWeek: [...f.daysOfWeek],
      },
    };
  }

  toJSON(): CronSpecDescription {
    return this.describe();
  }
}
