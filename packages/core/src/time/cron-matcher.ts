import type { CivilDate } from './civil.js';
import * as calendar from './civil.js';
import type { CronFields } from './cron-fields.js';

// Module-local bindings for the hot path: some TypeScript loaders (tsx, vite-node) compile imported
// bindings to property getters, which would cost a call on every use inside the search loops.
const { civilFromDays, daysFromCivil, daysInMonth, weekdayOfDays } = calendar;
const SECONDS_PER_DAY = 86_400;

/**
 * Finds matching wall-clock times of a parsed cron expression, on "local seconds" (seconds since
 * 1970-01-01T00:00 of the wall clock, see civil.ts). It knows nothing of zones: the cron spec maps each
 * constant-offset stretch of a zone to a range of local seconds and asks for matches inside it.
 *
 * Each field is a lookup table: `next[v]` is the smallest allowed value >= v (-1: none), `prev[v]` the
 * largest <= v. A search moves field by field from the largest unit down, jumping straight to the next
 * allowed value, so a call costs a handful of table reads rather than a scan.
 */

/** How far a search looks before giving up; every valid expression matches at least once in 40 years. */
export const SEARCH_HORIZON_YEARS = 400;

function nextTable(values: readonly number[], size: number): Int8Array {
  const table = new Int8Array(size + 1).fill(-1);
  let next = -1;
  for (let v = size - 1; v >= 0; v--) {
    if (values.includes(v)) next = v;
    table[v] = next;
  }
  return table;
}

function prevTable(values: readonly number[], size: number): Int8Array {
  const table = new Int8Array(size).fill(-1);
  let prev = -1;
  for (let v = 0; v < size; v++) {
    if (values.includes(v)) prev = v;
    table[v] = prev;
  }
  return table;
}

export class CronMatcher {
  readonly #secondNext: Int8Array;
  readonly #secondPrev: Int8Array;
  readonly #minuteNext: Int8Array;
  readonly #minutePrev: Int8Array;
  readonly #hourNext: Int8Array;
  readonly #hourPrev: Int8Array;
  readonly #monthNext: Int8Array;
  readonly #monthPrev: Int8Array;
  readonly #domAllowed: Uint8Array;
  readonly #dowAllowed: Uint8Array;
  readonly #lastDay: boolean;
  readonly #or: boolean;
  /** Every day matches: no day test at all. */
  readonly #everyDay: boolean;
  readonly #firstMonth: number;
  readonly #lastMonth: number;
  readonly #civil: CivilDate = { year: 0, month: 0, day: 0, weekday: 0 };
  /** The day `#civil` holds: successive searches mostly start on the day the previous one ended. */
  #civilDays = Number.NaN;

  constructor(fields: CronFields) {
    this.#secondNext = nextTable(fields.seconds, 60);
    this.#secondPrev = prevTable(fields.seconds, 60);
    this.#minuteNext = nextTable(fields.minutes, 60);
    this.#minutePrev = prevTable(fields.minutes, 60);
    this.#hourNext = nextTable(fields.hours, 24);
    this.#hourPrev = prevTable(fields.hours, 24);
    this.#monthNext = nextTable(fields.months, 13);
    this.#monthPrev = prevTable(fields.months, 13);
    this.#domAllowed = new Uint8Array(32);
    for (const d of fields.daysOfMonth) this.#domAllowed[d] = 1;
    this.#dowAllowed = new Uint8Array(7);
    for (const w of fields.daysOfWeek) this.#dowAllowed[w] = 1;
    this.#lastDay = fields.lastDayOfMonth;
    this.#or = fields.dayRule === 'or';
    this.#everyDay =
      !this.#or && !this.#lastDay && fields.daysOfMonth.length === 31 && fields.daysOfWeek.length === 7;
    this.#firstMonth = fields.months[0] as number;
    this.#lastMonth = fields.months[fields.months.length - 1] as number;
  }

  #dateOf(days: number): CivilDate {
    if (days !== this.#civilDays) {
      civilFromDays(days, this.#civil);
      this.#civilDays = days;
    }
    return this.#civil;
  }

  /** Whether the civil day matches the day-of-month / day-of-week part. */
  dayMatches(day: number, lastDay: number, weekday: number): boolean {
    const dom = this.#domAllowed[day] === 1 || (this.#lastDay && day === lastDay);
    const dow = this.#dowAllowed[weekday] === 1;
    return this.#or ? dom || dow : dom && dow;
  }

  /** The first matching local second >= `localSecond`, or NaN when none within the horizon. */
  next(localSecond: number): number {
    const days = Math.floor(localSecond / SECONDS_PER_DAY);
    let secondOfDay = localSecond - days * SECONDS_PER_DAY;
    const date = this.#dateOf(days);
    let year = date.year;
    let month = date.month;
    let day = date.day;
    let hour = Math.floor(secondOfDay / 3600);
    secondOfDay -= hour * 3600;
    let minute = Math.floor(secondOfDay / 60);
    let second = secondOfDay - minute * 60;
    const yearLimit = year + SEARCH_HORIZON_YEARS;
    for (;;) {
      const nextMonth = this.#monthNext[month] as number;
      if (nextMonth !== month) {
        if (nextMonth < 0) {
          year++;
          if (year > yearLimit) return Number.NaN;
          month = this.#firstMonth;
        } else month = nextMonth;
        day = 1;
        hour = minute = second = 0;
      }
      const monthLength = daysInMonth(year, month);
      if (day > monthLength) {
        month++;
        if (month > 12) {
          month = 1;
          year++;
          if (year > yearLimit) return Number.NaN;
        }
        day = 1;
        hour = minute = second = 0;
        continue;
      }
      if (!this.#everyDay) {
        let weekday = weekdayOfDays(daysFromCivil(year, month, day));
        let found = day;
        while (found <= monthLength && !this.dayMatches(found, monthLength, weekday)) {
          found++;
          weekday = weekday === 6 ? 0 : weekday + 1;
        }
        if (found !== day) {
          day = found;
          hour = minute = second = 0;
          if (found > monthLength) continue;
        }
      }
      const nextHour = this.#hourNext[hour] as number;
      if (nextHour !== hour) {
        if (nextHour < 0) {
          day++;
          hour = minute = second = 0;
          continue;
        }
        hour = nextHour;
        minute = second = 0;
      }
      const nextMinute = this.#minuteNext[minute] as number;
      if (nextMinute !== minute) {
        if (nextMinute < 0) {
          minute = second = 0;
          if (++hour > 23) {
            hour = 0;
            day++;
          }
          continue;
        }
        minute = nextMinute;
        second = 0;
      }
      const nextSecond = this.#secondNext[second] as number;
      if (nextSecond !== second) {
        if (nextSecond < 0) {
          second = 0;
          if (++minute > 59) {
            minute = 0;
            if (++hour > 23) {
              hour = 0;
              day++;
            }
          }
          continue;
        }
        second = nextSecond;
      }
      const dayStart =
        day === date.day && month === date.month && year === date.year
          ? days
          : daysFromCivil(year, month, day);
      return dayStart * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
    }
  }

  /** The last matching local second <= `localSecond`, or NaN when none within the horizon. */
  prev(localSecond: number): number {
    const days = Math.floor(localSecond / SECONDS_PER_DAY);
    let secondOfDay = localSecond - days * SECONDS_PER_DAY;
    const date = this.#dateOf(days);
    let year = date.year;
    let month = date.month;
    let day = date.day;
    let hour = Math.floor(secondOfDay / 3600);
    secondOfDay -= hour * 3600;
    let minute = Math.floor(secondOfDay / 60);
    let second = secondOfDay - minute * 60;
    const yearLimit = year - SEARCH_HORIZON_YEARS;
    for (;;) {
      const prevMonth = this.#monthPrev[month] as number;
      if (prevMonth !== month) {
        if (prevMonth < 0) {
          year--;
          if (year < yearLimit) return Number.NaN;
          month = this.#lastMonth;
        } else month = prevMonth;
        day = daysInMonth(year, month);
        hour = 23;
        minute = second = 59;
      }
      if (day < 1) {
        month--;
        if (month < 1) {
          month = 12;
          year--;
          if (year < yearLimit) return Number.NaN;
        }
        day = daysInMonth(year, month);
        hour = 23;
        minute = second = 59;
        continue;
      }
      if (!this.#everyDay) {
        const monthLength = daysInMonth(year, month);
        let weekday = weekdayOfDays(daysFromCivil(year, month, day));
        let found = day;
        while (found >= 1 && !this.dayMatches(found, monthLength, weekday)) {
          found--;
          weekday = weekday === 0 ? 6 : weekday - 1;
        }
        if (found !== day) {
          day = found;
          hour = 23;
          minute = second = 59;
          if (found < 1) continue;
        }
      }
      const prevHour = this.#hourPrev[hour] as number;
      if (prevHour !== hour) {
        if (prevHour < 0) {
          day--;
          hour = 23;
          minute = second = 59;
          continue;
        }
        hour = prevHour;
        minute = second = 59;
      }
      const prevMinute = this.#minutePrev[minute] as number;
      if (prevMinute !== minute) {
        if (prevMinute < 0) {
          minute = second = 59;
          if (--hour < 0) {
            hour = 23;
            day--;
          }
          continue;
        }
        minute = prevMinute;
        second = 59;
      }
      const prevSecond = this.#secondPrev[second] as number;
      if (prevSecond !== second) {
        if (prevSecond < 0) {
          second = 59;
          if (--minute < 0) {
            minute = 59;
            if (--hour < 0) {
              hour = 23;
              day--;
            }
          }
          continue;
        }
        second = prevSecond;
      }
      const dayStart =
        day === date.day && month === date.month && year === date.year
          ? days
          : daysFromCivil(year, month, day);
      return dayStart * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
    }
  }
}
