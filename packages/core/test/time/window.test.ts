import { describe, expect, it } from 'vitest';
import {
  between,
  days,
  lastDayOfMonth,
  parseTimeOfDay,
  unlessBetween,
  Window,
  wallClock,
} from '../../src/index.js';

const at = (text: string) => new Date(text);

describe('parseTimeOfDay', () => {
  it('reads HH:MM and HH:MM:SS, with a one-digit hour allowed', () => {
    expect(parseTimeOfDay('13:30', 'dailyAt')).toEqual({ hour: 13, minute: 30, second: 0 });
    expect(parseTimeOfDay('9:05:07', 'dailyAt')).toEqual({ hour: 9, minute: 5, second: 7 });
    expect(parseTimeOfDay('00:00', 'x')).toEqual({ hour: 0, minute: 0, second: 0 });
    expect(parseTimeOfDay('23:59:59', 'x')).toEqual({ hour: 23, minute: 59, second: 59 });
    expect(Object.isFrozen(parseTimeOfDay('23:59:59', 'x'))).toBe(true);
  });
});

describe('between and unlessBetween', () => {
  it('pass the wall-clock range inclusively, to the second, in the given zone', () => {
    const office = between('09:00', '17:00');
    expect(office.allows(at('2026-06-01T07:00:00Z'), 'Europe/Berlin')).toBe(true); // 09:00 CEST
    expect(office.allows(at('2026-06-01T06:59:59Z'), 'Europe/Berlin')).toBe(false);
    expect(office.allows(at('2026-06-01T15:00:00.999Z'), 'Europe/Berlin')).toBe(true); // 17:00:00.999
    expect(office.allows(at('2026-06-01T15:00:01Z'), 'Europe/Berlin')).toBe(false);
    expect(office.allows(at('2026-06-01T07:00:00Z'), 'UTC')).toBe(false);
  });

  it('wrap midnight when from is after to', () => {
    const night = between('22:00', '06:00');
    expect(night.allows(at('2026-01-10T23:30:00Z'), 'UTC')).toBe(true);
    expect(night.allows(at('2026-01-10T05:00:00Z'), 'UTC')).toBe(true);
    expect(night.allows(at('2026-01-10T06:00:00Z'), 'UTC')).toBe(true);
    expect(night.allows(at('2026-01-10T12:00:00Z'), 'UTC')).toBe(false);
    const notAtNight = unlessBetween('22:00', '06:00');
    expect(notAtNight.allows(at('2026-01-10T23:30:00Z'), 'UTC')).toBe(false);
    expect(notAtNight.allows(at('2026-01-10T12:00:00Z'), 'UTC')).toBe(true);
    expect(notAtNight.allows(at('2026-01-10T06:00:01Z'), 'UTC')).toBe(true);
  });

  it('read the wall clock across DST (the repeated hour is inside twice)', () => {
    const early = between('01:00', '01:59:59');
    expect(early.allows(at('2026-11-01T05:30:00Z'), 'America/New_York')).toBe(true); // 01:30 EDT
    expect(early.allows(at('2026-11-01T06:30:00Z'), 'America/New_York')).toBe(true); // 01:30 EST
    expect(early.allows(at('2026-11-01T07:30:00Z'), 'America/New_York')).toBe(false); // 02:30 EST
  });

  it('describe themselves as JSON', () => {
    expect(between('9:00', '17:30:15').describe()).toEqual({
      kind: 'between',
      from: '09:00:00',
      to: '17:30:15',
    });
    expect(JSON.parse(JSON.stringify(unlessBetween('22:00', '06:00')))).toEqual({
      kind: 'unlessBetween',
      from: '22:00:00',
      to: '06:00:00',
    });
    expect(String(between('22:00', '06:00'))).toBe('between(22:00:00, 06:00:00)');
  });
});

describe('days and lastDayOfMonth', () => {
  it('days passes the listed weekdays of the local date', () => {
    const weekend = days('SAT', 'sunday');
    expect(weekend.allows(at('2026-03-07T12:00:00Z'), 'UTC')).toBe(true); // Saturday
    expect(weekend.allows(at('2026-03-09T12:00:00Z'), 'UTC')).toBe(false); // Monday
    // 23:30 UTC on Sunday is already Monday in Tokyo.
    expect(weekend.allows(at('2026-03-08T23:30:00Z'), 'UTC')).toBe(true);
    expect(weekend.allows(at('2026-03-08T23:30:00Z'), 'Asia/Tokyo')).toBe(false);
    expect(days(7, 1).describe()).toEqual({ kind: 'days', days: [0, 1] });
    expect(String(days(5, 1, 5))).toBe('days(MON, FRI)');
  });

  it('lastDayOfMonth passes the last local day, February of leap years included', () => {
    expect(lastDayOfMonth.allows(at('2028-02-29T12:00:00Z'), 'UTC')).toBe(true);
    expect(lastDayOfMonth.allows(at('2027-02-28T12:00:00Z'), 'UTC')).toBe(true);
    expect(lastDayOfMonth.allows(at('2028-02-28T12:00:00Z'), 'UTC')).toBe(false);
    // 30 April 22:00 UTC is 1 May in Berlin.
    expect(lastDayOfMonth.allows(at('2026-04-30T22:30:00Z'), 'UTC')).toBe(true);
    expect(lastDayOfMonth.allows(at('2026-04-30T22:30:00Z'), 'Europe/Berlin')).toBe(false);
    expect(lastDayOfMonth.describe()).toEqual({ kind: 'lastDayOfMonth' });
  });

  it('the Window namespace holds the same constructors, and windows test one wall-clock reading', () => {
    expect(Window.lastDayOfMonth).toBe(lastDayOfMonth);
    const clock = wallClock(at('2026-03-31T10:00:00Z'), 'Europe/Berlin');
    const windows = [Window.between('09:00', '17:00'), Window.days('TUE'), Window.lastDayOfMonth];
    expect(windows.map((w) => w.allowsWallClock(clock))).toEqual([true, true, true]);
    expect(Object.isFrozen(Window)).toBe(true);
  });
});
