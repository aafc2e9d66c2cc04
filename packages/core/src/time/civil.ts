/**
 * Integer calendar arithmetic on the proleptic Gregorian calendar, with no `Date` and no host zone.
 * Wall-clock times are handled as "local seconds": seconds since 1970-01-01T00:00 of the wall clock, as if
 * the wall clock were UTC. The conversions are the classic era-based day-count formulas (400-year eras of
 * 146,097 days), exact for every year representable here.
 */

export const SECONDS_PER_DAY = 86_400;
export const MS_PER_SECOND = 1000;
export const MS_PER_DAY = 86_400_000;

const DAYS_IN_MONTH = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

export function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

/** Days in `month` (1-12) of `year`. */
export function daysInMonth(year: number, month: number): number {
  return month === 2 ? (isLeapYear(year) ? 29 : 28) : (DAYS_IN_MONTH[month] as number);
}

/** Days since 1970-01-01 of the civil date `year-month-day` (month 1-12). */
export function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const shiftedMonth = month > 2 ? month - 3 : month + 9; // March = 0, so leap days fall at the end
  const dayOfYear = Math.floor((153 * shiftedMonth + 2) / 5) + day - 1;
  const dayOfEra = yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear;
  return era * 146_097 + dayOfEra - 719_468;
}

/** A civil date; `weekday` is 0 (Sunday) to 6 (Saturday). */
export interface CivilDate {
  year: number;
  month: number;
  day: number;
  weekday: number;
}

/** Writes the civil date of `days` (days since 1970-01-01) into `out` and returns it. */
export function civilFromDays(days: number, out: CivilDate): CivilDate {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const dayOfEra = z - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra -
      Math.floor(dayOfEra / 1460) +
      Math.floor(dayOfEra / 36_524) -
      Math.floor(dayOfEra / 146_096)) /
      365,
  );
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const shiftedMonth = Math.floor((5 * dayOfYear + 2) / 153);
  const month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9;
  out.year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  out.month = month;
  out.day = dayOfYear - Math.floor((153 * shiftedMonth + 2) / 5) + 1;
  out.weekday = weekdayOfDays(days);
  return out;
}

/** Weekday (0 = Sunday) of `days` since 1970-01-01, which was a Thursday. */
export function weekdayOfDays(days: number): number {
  const w = (days + 4) % 7;
  return w < 0 ? w + 7 : w + 0; // + 0 turns -0 into 0
}
