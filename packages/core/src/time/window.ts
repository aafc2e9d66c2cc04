import { InvalidArgumentError } from '../errors.js';
import { daysInMonth } from './civil.js';
import { WEEKDAY_NAMES } from './cron-fields.js';
import { type WallClock, wallClock } from './zone.js';

/**
 * Filters on the wall clock, for declarations that run "only between 09:00 and 17:00", "not at night",
 * "on weekdays" or "on the last day of the month". Pure: a window says yes or no for an instant read in a
 * zone, and holds no zone of its own, so one window can serve declarations in several zones.
 */

/** A wall-clock time of day. */
export interface TimeOfDay {
  readonly hour: number;
  readonly minute: number;
  readonly second: number;
}

const TIME_OF_DAY = /^(\d{1,2}):(\d{2})(?::(\d{2}))?$/;

/**
 * Parses `HH:MM` or `HH:MM:SS` (24-hour clock, `00:00` to `23:59:59`; the hour may have one digit).
 *
 * @param field names the option or argument in the error (`dailyAt`, `between.from`).
 * @throws {InvalidArgumentError} naming `field` and the value.
 */
export function parseTimeOfDay(text: string, field: string): TimeOfDay {
  const match = typeof text === 'string' ? TIME_OF_DAY.exec(text) : null;
  const reason = 'must be a 24-hour wall-clock time "HH:MM" or "HH:MM:SS", from 00:00 to 23:59:59';
  if (match === null) throw new InvalidArgumentError(field, text, reason);
  const hour = Number(match[1]);
  const minute = Number(match[2]);
  const second = match[3] === undefined ? 0 : Number(match[3]);
  if (hour > 23 || minute > 59 || second > 59) throw new InvalidArgumentError(field, text, reason);
  return Object.freeze({ hour, minute, second });
}

/** `HH:MM:SS`. */
export function formatTimeOfDay(time: TimeOfDay): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(time.hour)}:${two(time.minute)}:${two(time.second)}`;
}

/** The JSON-safe description of a {@link Window}. */
export type WindowDescription =
  | { kind: 'between'; from: string; to: string }
  | { kind: 'unlessBetween'; from: string; to: string }
  | { kind: 'days'; days: number[] }
  | { kind: 'lastDayOfMonth' };

/** The parts of a wall-clock reading a window looks at. */
export type WindowClock = Pick<
  WallClock,
  'year' | 'month' | 'day' | 'hour' | 'minute' | 'second' | 'weekday'
>;

/** A pure filter on the wall clock. */
export interface Window {
  /** Whether `instant`, read on the wall clock of `zone`, passes. */
  allows(instant: Date, zone: string): boolean;
  /** Whether a wall-clock reading passes (to test several windows against one {@link wallClock} reading). */
  allowsWallClock(clock: WindowClock): boolean;
  describe(): WindowDescription;
  toString(): string;
}

abstract class WallClockWindow implements Window {
  allows(instant: Date, zone: string): boolean {
    return this.allowsWallClock(wallClock(instant, zone));
  }
  abstract allowsWallClock(clock: WindowClock): boolean;
  abstract describe(): WindowDescription;
  abstract toString(): string;
  toJSON(): WindowDescription {
    return this.describe();
  }
}

class TimeRangeWindow extends WallClockWindow {
  readonly #from: number;
  readonly #to: number;
  readonly #inside: boolean;
  readonly #description: WindowDescription;

  constructor(kind: 'between' | 'unlessBetween', from: string, to: string) {
    super();
    const start = parseTimeOfDay(from, `${kind}.from`);
    const end = parseTimeOfDay(to, `${kind}.to`);
    this.#from = start.hour * 3600 + start.minute * 60 + start.second;
    this.#to = end.hour * 3600 + end.minute * 60 + end.second;
    if (this.#from === this.#to)
      throw new InvalidArgumentError(
        `${kind}.to`,
        to,
        `equals ${kind}.from; a window needs two different times`,
      );
    this.#inside = kind === 'between';
    this.#description = { kind, from: formatTimeOfDay(start), to: formatTimeOfDay(end) };
    Object.freeze(this);
  }

  allowsWallClock(clock: WindowClock): boolean {
    const t = clock.hour * 3600 + clock.minute * 60 + clock.second;
    const within =
      this.#from < this.#to ? t >= this.#from && t <= this.#to : t >= this.#from || t <= this.#to;
    return within === this.#inside;
  }

  describe(): WindowDescription {
    return { ...this.#description };
  }

  toString(): string {
    const d = this.#description as { kind: string; from: string; to: string };
    return `${d.kind}(${d.from}, ${d.to})`;
  }
}

class DaysWindow extends WallClockWindow {
  readonly #allowed: readonly number[];

  constructor(weekdays: ReadonlyArray<number | string>) {
    super();
    if (weekdays.length === 0)
      throw new InvalidArgumentError('days', weekdays, 'needs at least one weekday (0-7 or SUN..SAT)');
    this.#allowed = Object.freeze(
      [...new Set(weekdays.map((w, i) => parseWeekday(w, `days[${i}]`)))].sort((a, b) => a - b),
    );
    Object.freeze(this);
  }

  allowsWallClock(clock: WindowClock): boolean {
    return this.#allowed.includes(clock.weekday);
  }

  describe(): WindowDescription {
    return { kind: 'days', days: [...this.#allowed] };
  }

  toString(): string {
    return `days(${this.#allowed.map((d) => WEEKDAY_NAMES[d]).join(', ')})`;
  }
}

class LastDayOfMonthWindow extends WallClockWindow {
  constructor() {
    super();
    Object.freeze(this);
  }

  allowsWallClock(clock: WindowClock): boolean {
    return clock.day === daysInMonth(clock.year, clock.month);
  }

  describe(): WindowDescription {
    return { kind: 'lastDayOfMonth' };
  }

  toString(): string {
    return 'lastDayOfMonth';
  }
}

const FULL_WEEKDAY_NAMES = ['SUNDAY', 'MONDAY', 'TUESDAY', 'WEDNESDAY', 'THURSDAY', 'FRIDAY', 'SATURDAY'];

/**
 * Reads a weekday: 0-7 (0 and 7 are Sunday), `SUN`..`SAT` or `Sunday`..`Saturday` in any case. Returns 0-6.
 *
 * @throws {InvalidArgumentError} naming `field` and the value.
 */
export function parseWeekday(value: number | string, field: string): number {
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 7) return value % 7;
  if (typeof value === 'string') {
    const upper = value.toUpperCase();
    const short = WEEKDAY_NAMES.indexOf(upper);
    if (short >= 0) return short;
    const full = FULL_WEEKDAY_NAMES.indexOf(upper);
    if (full >= 0) return full;
  }
  throw new InvalidArgumentError(
    field,
    value,
    'must be a weekday: 0-7 (0 and 7 are Sunday), SUN..SAT or Sunday..Saturday',
  );
}

/**
 * Passes wall-clock times from `from` to `to` inclusive, to the second (`HH:MM[:SS]`). When `from` is
 * after `to` the window wraps midnight: `between('22:00', '06:00')` passes 23:30 and 05:00.
 *
 * @throws {InvalidArgumentError} naming `between.from` or `between.to`.
 */
export function between(from: string, to: string): Window {
  return new TimeRangeWindow('between', from, to);
}

/** The complement of {@link between}: passes everything outside `from`..`to` (which may wrap midnight). */
export function unlessBetween(from: string, to: string): Window {
  return new TimeRangeWindow('unlessBetween', from, to);
}

/** Passes the given weekdays: `days('MON', 'TUE')`, `days(1, 2)`, `days('saturday', 0)`. */
export function days(...weekdays: Array<number | string>): Window {
  return new DaysWindow(weekdays);
}

/** Passes the last day of each month (28th to 31st as the month has it). */
export const lastDayOfMonth: Window = new LastDayOfMonthWindow();

/** The window constructors in one place: `Window.between('09:00', '17:00')`. */
export const Window = Object.freeze({ between, unlessBetween, days, lastDayOfMonth });
