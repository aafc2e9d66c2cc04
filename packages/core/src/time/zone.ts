import { IANAZone } from 'luxon';
import { InvalidArgumentError, InvalidZoneError } from '../errors.js';
import { type CivilDate, civilFromDays, daysFromCivil, MS_PER_DAY } from './civil.js';
import { instantOf } from './instant.js';

/**
 * Time zones: validation, and a per-zone table of UTC offsets from which the time engine converts between
 * instants and wall-clock time without calling luxon (or `Intl`) on its hot path.
 *
 * luxon provides the zone data (it reads the runtime's IANA database through `Intl`). A table covers one
 * UTC year at a time, computed on first use and cached for the life of the process: the offset is sampled
 * once per UTC day and every change is narrowed down to the exact second by bisection. Each year's table
 * also lists the transitions up to {@link TRANSITION_MARGIN_MS} beyond its ends, so a segment that starts
 * or ends near a year boundary still knows the real offsets on both sides.
 */

/** A stretch of UTC time with one constant offset, and the offsets on either side of it. */
export interface OffsetSegment {
  /** First instant (UTC ms) of the segment. A year boundary when no transition is near (same offsets). */
  start: number;
  /** First instant after the segment (exclusive). */
  end: number;
  /** Offset in milliseconds (local = UTC + offset) inside the segment. */
  offset: number;
  /** Offset just before `start`. Smaller than `offset`: a gap ends at `start`; larger: an overlap begins. */
  offsetBefore: number;
  /** Offset from `end` on. */
  offsetAfter: number;
}

/** How far beyond a year's ends its table lists transitions; larger than any gap or overlap in tzdata. */
export const TRANSITION_MARGIN_MS = 3 * MS_PER_DAY;

interface YearTable {
  /** First instant of the UTC year. */
  start: number;
  /** First instant of the next UTC year. */
  end: number;
  /** Offset at `start - TRANSITION_MARGIN_MS`. */
  initialOffset: number;
  /** Instants in `[start - margin, end + margin)` where the offset changes, ascending. */
  transitions: number[];
  /** `offsets[i]` is the offset from `transitions[i]` on. */
  offsets: number[];
}

const IANA_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/;
const HOST_ZONE_NAMES = /^(?:local|system|localtime|default)$/i;
const validatedZones = new Map<string, string>();

/**
 * Checks that `zone` names an IANA time zone this runtime knows and returns its canonical name
 * (`us/eastern` → `America/New_York`, `Etc/UTC` → `UTC`). `local`, the empty string, offsets such as
 * `+02:00` and unknown names are rejected: the host's zone never leaks in.
 *
 * @param field names the option or argument in the error (`zone`, `options.timeZone`).
 * @throws {InvalidZoneError} naming `field` and the value.
 */
export function validateZone(zone: unknown, field = 'zone'): string {
  if (typeof zone === 'string') {
    const known = validatedZones.get(zone);
    if (known !== undefined) return known;
  }
  if (typeof zone !== 'string')
    throw new InvalidZoneError(
      field,
      zone,
      'must be a string naming an IANA time zone ("UTC", "Europe/Berlin")',
    );
  if (zone.trim() === '')
    throw new InvalidZoneError(
      field,
      zone,
      'must name an IANA time zone explicitly ("UTC", "Europe/Berlin")',
    );
  if (HOST_ZONE_NAMES.test(zone))
    throw new InvalidZoneError(
      field,
      zone,
      'would depend on the host\'s zone; name an IANA time zone explicitly ("UTC", "Europe/Berlin")',
    );
  if (!IANA_NAME.test(zone))
    throw new InvalidZoneError(
      field,
      zone,
      'is not an IANA time zone name (fixed offsets are written "Etc/GMT-2", or use a city zone)',
    );
  if (!IANAZone.isValidZone(zone))
    throw new InvalidZoneError(field, zone, "is not a time zone in this runtime's IANA database");
  const canonical = new Intl.DateTimeFormat('en-US', { timeZone: zone }).resolvedOptions().timeZone;
  validatedZones.set(zone, canonical);
  return canonical;
}

const tables = new Map<string, ZoneOffsets>();

/** The UTC offsets of one zone, computed lazily per UTC year and cached. Get one with {@link zoneOffsets}. */
export class ZoneOffsets {
  readonly zone: string;
  readonly #luxonZone: IANAZone;
  readonly #years = new Map<number, YearTable>();
  #recent: YearTable | undefined;
  readonly #scratch: CivilDate = { year: 0, month: 0, day: 0, weekday: 0 };

  /** @param zone a canonical zone name, already validated. */
  constructor(zone: string) {
    this.zone = zone;
    this.#luxonZone = IANAZone.create(zone);
  }

  /**
   * The offset in milliseconds (local = UTC + offset) at instant `utcMs`.
   *
   * @throws {InvalidArgumentError} naming `utcMs` when it is not a finite number.
   */
  offsetAt(utcMs: number): number {
    const year = this.#yearOf(utcMs);
    const transitions = year.transitions;
    let offset = year.initialOffset;
    for (let i = 0; i < transitions.length && (transitions[i] as number) <= utcMs; i++)
      offset = year.offsets[i] as number;
    return offset;
  }

  /**
   * Writes the constant-offset segment containing `utcMs` into `out` and returns it.
   *
   * @throws {InvalidArgumentError} naming `utcMs` when it is not a finite number.
   */
  segmentAt(utcMs: number, out: OffsetSegment): OffsetSegment {
    const year = this.#yearOf(utcMs);
    const transitions = year.transitions;
    const offsets = year.offsets;
    let k = -1;
    while (k + 1 < transitions.length && (transitions[k + 1] as number) <= utcMs) k++;
    if (k >= 0) {
      out.start = transitions[k] as number;
      out.offset = offsets[k] as number;
      out.offsetBefore = k > 0 ? (offsets[k - 1] as number) : year.initialOffset;
    } else {
      out.start = year.start;
      out.offset = year.initialOffset;
      out.offsetBefore = year.initialOffset;
    }
    if (k + 1 < transitions.length) {
      out.end = transitions[k + 1] as number;
      out.offsetAfter = offsets[k + 1] as number;
    } else {
      out.end = year.end;
      out.offsetAfter = out.offset;
    }
    return out;
  }

  #yearOf(utcMs: number): YearTable {
    const recent = this.#recent;
    if (recent !== undefined && utcMs >= recent.start && utcMs < recent.end) return recent;
    // Off the hot path: a NaN or infinite instant would make a table of NaNs and searches without end.
    if (typeof utcMs !== 'number' || !Number.isFinite(utcMs))
      throw new InvalidArgumentError('utcMs', utcMs, 'must be a finite number of epoch milliseconds');
    const year = civilFromDays(Math.floor(utcMs / MS_PER_DAY), this.#scratch).year;
    let table = this.#years.get(year);
    if (table === undefined) {
      table = this.#computeYear(year);
      this.#years.set(year, table);
    }
    this.#recent = table;
    return table;
  }

  #offsetFromLuxon(utcMs: number): number {
    // luxon reports minutes, fractional for historical offsets with seconds; keep whole seconds.
    return Math.round(this.#luxonZone.offset(utcMs) * 60) * 1000;
  }

  #computeYear(year: number): YearTable {
    const start = daysFromCivil(year, 1, 1) * MS_PER_DAY;
    const end = daysFromCivil(year + 1, 1, 1) * MS_PER_DAY;
    const from = start - TRANSITION_MARGIN_MS;
    const to = end + TRANSITION_MARGIN_MS;
    const initialOffset = this.#offsetFromLuxon(from);
    const transitions: number[] = [];
    const offsets: number[] = [];
    let before = from;
    let beforeOffset = initialOffset;
    for (let at = from + MS_PER_DAY; at <= to; at += MS_PER_DAY) {
      const atOffset = this.#offsetFromLuxon(at);
      // More than one change may hide between two samples: find them one at a time, left to right.
      while (atOffset !== beforeOffset) {
        let lo = before;
        let hi = at;
        while (hi - lo > 1000) {
          const mid = lo + Math.floor((hi - lo) / 2000) * 1000;
          if (this.#offsetFromLuxon(mid) === beforeOffset) lo = mid;
          else hi = mid;
        }
        const changedTo = this.#offsetFromLuxon(hi);
        if (hi < to) {
          transitions.push(hi);
          offsets.push(changedTo);
        }
        before = hi;
        beforeOffset = changedTo;
      }
      before = at;
    }
    return { start, end, initialOffset, transitions, offsets };
  }
}

/** The shared offset table of a zone; `zone` is validated (and canonicalised) first. */
export function zoneOffsets(zone: string, field = 'zone'): ZoneOffsets {
  const canonical = validateZone(zone, field);
  let table = tables.get(canonical);
  if (table === undefined) {
    table = new ZoneOffsets(canonical);
    tables.set(canonical, table);
  }
  return table;
}

/** Wall-clock reading of an instant in a zone. `weekday` is 0 (Sunday) to 6 (Saturday). */
export interface WallClock {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
  millisecond: number;
  weekday: number;
  /** The zone's UTC offset at the instant, in minutes (local = UTC + offset). */
  offsetMinutes: number;
}

/**
 * Reads the wall clock of `zone` at `instant`, through the same offset tables as the cron engine.
 *
 * @throws {InvalidArgumentError} naming `instant` when it is not a valid `Date`.
 * @throws {InvalidZoneError} when `zone` is not a known IANA zone.
 */
export function wallClock(instant: Date, zone: string): WallClock {
  const utcMs = instantOf('instant', instant);
  const offset = zoneOffsets(zone).offsetAt(utcMs);
  const localMs = utcMs + offset;
  const days = Math.floor(localMs / MS_PER_DAY);
  const date = civilFromDays(days, { year: 0, month: 0, day: 0, weekday: 0 });
  const msOfDay = localMs - days * MS_PER_DAY;
  return {
    year: date.year,
    month: date.month,
    day: date.day,
    hour: Math.floor(msOfDay / 3_600_000),
    minute: Math.floor(msOfDay / 60_000) % 60,
    second: Math.floor(msOfDay / 1000) % 60,
    millisecond: msOfDay % 1000,
    weekday: date.weekday,
    offsetMinutes: offset / 60_000,
  };
}
