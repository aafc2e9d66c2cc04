import { describe, expect, it } from 'vitest';
import { CRON_MACROS, type CronSpec, parseCron } from '../../src/index.js';

const iso = (d: Date | undefined) => d?.toISOString();

function take(spec: CronSpec, after: string, count: number): string[] {
  const out: string[] = [];
  let at = new Date(after);
  for (let i = 0; i < count; i++) {
    at = spec.next(at) as Date;
    out.push(at.toISOString().replace(':00.000Z', 'Z'));
  }
  return out;
}

function weekdays(spec: CronSpec, after: string, count: number): string[] {
  let at = new Date(after);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    at = spec.next(at) as Date;
    out.push(`${at.getUTCDate()} ${['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'][at.getUTCDay()]}`);
  }
  return out;
}

describe('cron grammar', () => {
  it('reads 5 fields with seconds at 0, and 6 fields with seconds first', () => {
    expect(take(parseCron('*/20 * * * *', 'UTC'), '2026-01-01T00:00:00Z', 3)).toEqual([
      '2026-01-01T00:20Z',
      '2026-01-01T00:40Z',
      '2026-01-01T01:00Z',
    ]);
    const seconds = parseCron('15,45 * * * * *', 'UTC');
    expect(iso(seconds.next(new Date('2026-01-01T00:00:00Z')))).toBe('2026-01-01T00:00:15.000Z');
    expect(iso(seconds.next(new Date('2026-01-01T00:00:15Z')))).toBe('2026-01-01T00:00:45.000Z');
    expect(iso(seconds.next(new Date('2026-01-01T00:00:45.001Z')))).toBe('2026-01-01T00:01:15.000Z');
    expect(seconds.describe().fields.second).toEqual([15, 45]);
  });

  it('is strictly after and strictly before, at millisecond precision', () => {
    const spec = parseCron('* * * * * *', 'UTC');
    expect(iso(spec.next(new Date('2026-01-01T10:00:00.000Z')))).toBe('2026-01-01T10:00:01.000Z');
    expect(iso(spec.next(new Date('2026-01-01T10:00:00.500Z')))).toBe('2026-01-01T10:00:01.000Z');
    expect(iso(spec.prev(new Date('2026-01-01T10:00:00.000Z')))).toBe('2026-01-01T09:59:59.000Z');
    expect(iso(spec.prev(new Date('2026-01-01T10:00:00.500Z')))).toBe('2026-01-01T10:00:00.000Z');
  });

  it('reads month and weekday names in any case, lists, ranges and steps', () => {
    const spec = parseCron('0 12 * jan,Mar-apr/1 mon-WED', 'UTC');
    expect(spec.describe().fields.month).toEqual([1, 3, 4]);
    expect(spec.describe().fields.dayOfWeek).toEqual([1, 2, 3]);
    expect(parseCron('0 0-12/4 * * *', 'UTC').describe().fields.hour).toEqual([0, 4, 8, 12]);
    expect(parseCron('5/20 * * * *', 'UTC').describe().fields.minute).toEqual([5, 25, 45]);
    expect(parseCron('1,5-7,30-59/15 * * * *', 'UTC').describe().fields.minute).toEqual([1, 5, 6, 7, 30, 45]);
    expect(parseCron('*/7 * * * *', 'UTC').describe().fields.minute).toEqual([
      0, 7, 14, 21, 28, 35, 42, 49, 56,
    ]);
  });

  it('reads 0 and 7 as Sunday, and SUN at the end of a range as 7', () => {
    expect(parseCron('0 0 * * 7', 'UTC').describe().fields.dayOfWeek).toEqual([0]);
    expect(parseCron('0 0 * * 5-7', 'UTC').describe().fields.dayOfWeek).toEqual([0, 5, 6]);
    expect(parseCron('0 0 * * FRI-SUN', 'UTC').describe().fields.dayOfWeek).toEqual([0, 5, 6]);
    expect(parseCron('0 0 * * 1/2', 'UTC').describe().fields.dayOfWeek).toEqual([0, 1, 3, 5]);
    expect(weekdays(parseCron('0 0 * * 7', 'UTC'), '2026-03-01T00:00:00Z', 2)).toEqual(['8 SUN', '15 SUN']);
  });

  it('reads L as the last day of each month, leap years included', () => {
    expect(take(parseCron('0 0 L * *', 'UTC'), '2028-01-15T00:00:00Z', 4)).toEqual([
      '2028-01-31T00:00Z',
      '2028-02-29T00:00Z',
      '2028-03-31T00:00Z',
      '2028-04-30T00:00Z',
    ]);
    expect(take(parseCron('0 0 1,L 2 *', 'UTC'), '2027-01-15T00:00:00Z', 3)).toEqual([
      '2027-02-01T00:00Z',
      '2027-02-28T00:00Z',
      '2028-02-01T00:00Z',
    ]);
    expect(parseCron('0 0 L * *', 'UTC').describe().fields.dayOfMonth).toEqual(['L']);
  });

  it('expands every @ macro to its 5-field expression, in any case', () => {
    for (const [macro, expansion] of Object.entries(CRON_MACROS)) {
      const a = parseCron(macro.toUpperCase(), 'Europe/Berlin');
      const b = parseCron(expansion, 'Europe/Berlin');
      expect(a.describe().fields).toEqual(b.describe().fields);
      expect(take(a, '2026-03-20T10:11:12Z', 3)).toEqual(take(b, '2026-03-20T10:11:12Z', 3));
      expect(a.toString()).toBe(macro.toUpperCase());
    }
    expect(take(parseCron('@weekly', 'UTC'), '2026-03-01T00:00:00Z', 2)).toEqual([
      '2026-03-08T00:00Z',
      '2026-03-15T00:00Z',
    ]);
  });

  it('accepts "?" as "*" in the day fields', () => {
    expect(parseCron('0 0 ? * MON', 'UTC').describe().dayRule).toBe('and');
    expect(weekdays(parseCron('0 0 ? * MON', 'UTC'), '2026-03-01T00:00:00Z', 2)).toEqual(['2 MON', '9 MON']);
  });
});

describe('day-of-month and day-of-week', () => {
  it('OR when both are restricted: the 1st of the month, and every Monday', () => {
    const spec = parseCron('0 9 1 * MON', 'UTC');
    expect(spec.describe().dayRule).toBe('or');
    expect(weekdays(spec, '2026-05-28T00:00:00Z', 4)).toEqual(['1 MON', '8 MON', '15 MON', '22 MON']);
    expect(weekdays(spec, '2026-06-28T00:00:00Z', 3)).toEqual(['29 MON', '1 WED', '6 MON']);
  });

  it('OR even for "1-7 MON": every day from the 1st to the 7th, plus every Monday (not the first Monday)', () => {
    expect(weekdays(parseCron('0 9 1-7 * MON', 'UTC'), '2026-03-06T12:00:00Z', 4)).toEqual([
      '7 SAT',
      '9 MON',
      '16 MON',
      '23 MON',
    ]);
  });

  it('AND when one field starts with "*": "*/2" days that are also Mondays', () => {
    const spec = parseCron('0 9 */2 * MON', 'UTC');
    expect(spec.describe().dayRule).toBe('and');
    // Odd days of March 2026 that are Mondays: the 9th, 23rd; then 13 April (odd Monday)... every match is both.
    for (const line of weekdays(spec, '2026-03-01T00:00:00Z', 6)) {
      const [day, name] = line.split(' ');
      expect(Number(day) % 2).toBe(1);
      expect(name).toBe('MON');
    }
    const weekdayStar = parseCron('0 9 1,15 * */2', 'UTC');
    expect(weekdayStar.describe().dayRule).toBe('and');
    for (const line of weekdays(weekdayStar, '2026-01-01T00:00:00Z', 6)) {
      const [day, name] = line.split(' ');
      expect(['1', '15']).toContain(day);
      expect(['SUN', 'TUE', 'THU', 'SAT']).toContain(name);
    }
  });

  it('one restricted field alone decides', () => {
    expect(weekdays(parseCron('0 9 15 * *', 'UTC'), '2026-03-01T00:00:00Z', 2)).toEqual(['15 SUN', '15 WED']);
    expect(weekdays(parseCron('0 9 * * FRI', 'UTC'), '2026-03-01T00:00:00Z', 2)).toEqual(['6 FRI', '13 FRI']);
  });

  it('an impossible day-of-month is fine when the weekday can still match (OR)', () => {
    expect(weekdays(parseCron('0 0 30 2 MON', 'UTC'), '2027-01-31T00:00:00Z', 2)).toEqual(['1 MON', '8 MON']);
  });
});

describe('spec objects', () => {
  it('are frozen, canonicalise the zone and describe themselves as JSON', () => {
    const spec = parseCron('  0 9 * * MON-FRI ', 'europe/berlin', { dst: { gap: 'shift' } });
    expect(Object.isFrozen(spec)).toBe(true);
    expect(spec.timeZone).toBe('Europe/Berlin');
    expect(spec.toString()).toBe('0 9 * * MON-FRI');
    expect(spec.dst).toEqual({ gap: 'shift', overlap: 'both' });
    const description = spec.describe();
    expect(JSON.parse(JSON.stringify(spec))).toEqual(description);
    expect(description).toEqual({
      kind: 'cron',
      expression: '0 9 * * MON-FRI',
      timeZone: 'Europe/Berlin',
      dst: { gap: 'shift', overlap: 'both' },
      dayRule: 'and',
      fields: {
        second: [0],
        minute: [0],
        hour: [9],
        dayOfMonth: Array.from({ length: 31 }, (_, i) => i + 1),
        month: Array.from({ length: 12 }, (_, i) => i + 1),
        dayOfWeek: [1, 2, 3, 4, 5],
      },
    });
    description.fields.hour.push(10);
    expect(spec.describe().fields.hour).toEqual([9]);
  });

  it('never uses the host zone', () => {
    // The host's TZ is whatever the machine says; the answer depends only on the given zone.
    const spec = parseCron('0 9 * * *', 'Asia/Tokyo');
    expect(iso(spec.next(new Date('2026-06-01T00:00:00Z')))).toBe('2026-06-02T00:00:00.000Z');
  });

  it('enumerates occurrences lazily in [from, to)', () => {
    const spec = parseCron('0 0 * * *', 'UTC');
    const all = [...spec.occurrences(new Date('2026-01-01T00:00:00Z'), new Date('2026-01-04T00:00:00Z'))];
    expect(all.map((d) => d.toISOString())).toEqual([
      '2026-01-01T00:00:00.000Z',
      '2026-01-02T00:00:00.000Z',
      '2026-01-03T00:00:00.000Z',
    ]);
    const iterator = spec.occurrences(new Date(0), new Date('9999-01-01T00:00:00Z'))[Symbol.iterator]();
    expect(iterator.next().value?.toISOString()).toBe('1970-01-01T00:00:00.000Z');
    expect(iterator.next().value?.toISOString()).toBe('1970-01-02T00:00:00.000Z');
  });

  it('works before 1970 and returns undefined beyond the years 1 to 9999 instead of searching forever', () => {
    const spec = parseCron('0 12 1 1 *', 'UTC');
    expect(iso(spec.next(new Date('1969-06-01T00:00:00Z')))).toBe('1970-01-01T12:00:00.000Z');
    expect(iso(spec.prev(new Date('1969-06-01T00:00:00Z')))).toBe('1969-01-01T12:00:00.000Z');
    expect(spec.next(new Date('9999-01-01T12:00:00Z'))).toBeUndefined();
    expect(spec.prev(new Date('0001-01-01T12:00:00Z'))).toBeUndefined();
    expect(spec.next(new Date(8.64e15))).toBeUndefined();
    expect(iso(spec.next(new Date(-8.64e15)))).toBe('0001-01-01T12:00:00.000Z');
  });

  it('finds a rare date far away (29 February on a Saturday or Sunday)', () => {
    const spec = parseCron('0 0 29 2 */6', 'America/New_York');
    expect(iso(spec.next(new Date('2021-01-01T00:00:00Z')))).toBe('2032-02-29T05:00:00.000Z');
    expect(iso(spec.prev(new Date('2032-02-29T05:00:00Z')))).toBe('2020-02-29T05:00:00.000Z');
  });
});
