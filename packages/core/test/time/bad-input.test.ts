import { describe, expect, it } from 'vitest';
import {
  between,
  CronSyntaxError,
  DuetimeError,
  days,
  InvalidArgumentError,
  InvalidZoneError,
  interval,
  intervalFrom,
  parseCron,
  parseTimeOfDay,
  validateZone,
  wallClock,
  zoneOffsets,
} from '../../src/index.js';

/** Runs `fn`, expecting it to throw; returns the error. */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

/**
 * Every rejection of the cron grammar: [expression, field, offending value, what the reason must say].
 * The message must name the whole expression, the field's text and the reason.
 */
const CRON_REJECTIONS: Array<[string, string, string, RegExp]> = [
  // wrong field count, empty input, unknown macros
  ['* * * *', 'expression', '* * * *', /has 4 fields; expected 5 .* or 6/],
  ['* * * * * * *', 'expression', '* * * * * * *', /has 7 fields/],
  ['', 'expression', '', /is empty/],
  ['   ', 'expression', '   ', /is empty/],
  ['@often', 'expression', '@often', /unknown macro; expected one of @yearly/],
  ['@daily 5', 'expression', '@daily 5', /unknown macro/],
  // out-of-range values, in every field
  ['60 * * * * *', 'second', '60', /60 is out of range for seconds \(0-59\)/],
  ['60 * * * *', 'minute', '60', /60 is out of range for minutes \(0-59\)/],
  ['* 24 * * *', 'hour', '24', /24 is out of range for hours \(0-23\)/],
  ['* * 0 * *', 'dayOfMonth', '0', /0 is out of range for day of month \(1-31\)/],
  ['* * 32 * *', 'dayOfMonth', '32', /32 is out of range/],
  ['* * * 0 *', 'month', '0', /0 is out of range for month \(1-12\)/],
  ['* * * 13 *', 'month', '13', /13 is out of range for month/],
  ['* * * * 8', 'dayOfWeek', '8', /8 is out of range for day of week \(0-7\)/],
  ['-1 * * * *', 'minute', '-1', /is not a number \(values are never negative\)/],
  ['1.5 * * * *', 'minute', '1.5', /"1.5" is not a number/],
  ['a * * * *', 'minute', 'a', /not a number; names are only allowed in the month and day-of-week/],
  // unknown names, names in the wrong field
  ['* * * FOO *', 'month', 'FOO', /unknown month name "FOO"; expected one of JAN/],
  ['* * * * FUNDAY', 'dayOfWeek', 'FUNDAY', /unknown day of week name "FUNDAY"/],
  ['* * * * JAN', 'dayOfWeek', 'JAN', /unknown day of week name "JAN"/],
  ['* MON * * *', 'hour', 'MON', /names are only allowed in the month and day-of-week fields/],
  // zero, malformed and oversized steps
  ['*/0 * * * *', 'minute', '*/0', /step 0 never advances/],
  ['5/0 * * * *', 'minute', '5/0', /step 0 never advances/],
  ['*/x * * * *', 'minute', '*/x', /step "x" is not a whole number/],
  ['1/2/3 * * * *', 'minute', '1/2/3', /more than one "\/"/],
  ['*/60 * * * *', 'minute', '*/60', /step 60 is larger than the range 0-59/],
  ['* */24 * * *', 'hour', '*/24', /step 24 is larger than the range 0-23/],
  ['* * */31 * *', 'dayOfMonth', '*/31', /step 31 is larger than the range 1-31/],
  ['* * * */12 *', 'month', '*/12', /step 12 is larger than the range 1-12/],
  ['* * * * */7', 'dayOfWeek', '*/7', /step 7 is larger than the range 0-6/],
  ['10-20/11 * * * *', 'minute', '10-20/11', /step 11 is larger than the range 10-20/],
  ['5-5/2 * * * *', 'minute', '5-5/2', /applies to the single value 5; a step needs a range/],
  ['59/1 * * * *', 'minute', '59/1', /applies to the single value 59/],
  // reversed ranges (ranges never wrap)
  ['30-10 * * * *', 'minute', '30-10', /range 30-10 is reversed \(30 > 10\); ranges do not wrap/],
  ['* * * DEC-JAN *', 'month', 'DEC-JAN', /range DEC-JAN is reversed \(12 > 1\)/],
  ['* * * * SAT-MON', 'dayOfWeek', 'SAT-MON', /range SAT-MON is reversed \(6 > 1\)/],
  // list syntax
  ['1,,2 * * * *', 'minute', '1,,2', /empty list item/],
  ['1- * * * *', 'minute', '1-', /empty range end/],
  // specials other dialects have
  ['0 L * * *', 'hour', 'L', /"L" is only supported in the day-of-month field/],
  ['0 0 L/2 * *', 'dayOfMonth', 'L/2', /"L" cannot take a step/],
  ['? * * * *', 'minute', '?', /"\?" is only allowed in the day-of-month and day-of-week fields/],
  ['H * * * *', 'minute', 'H', /"H" \(hashed values\) is not supported/],
  ['0 0 15W * *', 'dayOfMonth', '15W', /"W" \(nearest weekday\) and "L-n" are not supported/],
  ['0 0 LW * *', 'dayOfMonth', 'LW', /not supported/],
  ['0 0 L-2 * *', 'dayOfMonth', 'L-2', /not supported/],
  ['0 0 * * MON#2', 'dayOfWeek', 'MON#2', /"#" \(nth weekday of the month\) is not supported/],
  ['0 0 * * 5L', 'dayOfWeek', '5L', /"L" in day-of-week .* is not supported/],
  // dates that never exist
  ['0 0 30 2 *', 'dayOfMonth', '30', /never matches: day 30 never occurs in February/],
  ['0 0 31 4,6,9,11 *', 'dayOfMonth', '31', /day 31 never occurs in April, June, September or November/],
  ['0 0 30,31 FEB *', 'dayOfMonth', '30,31', /days 30,31 never occur in February/],
  ['0 0 31 2 */2', 'dayOfMonth', '31', /never matches/],
];

describe('cron bad-input corpus', () => {
  for (const [expression, field, value, reason] of CRON_REJECTIONS) {
    it(`rejects ${JSON.stringify(expression)} naming ${field} ${JSON.stringify(value)}`, () => {
      const error = thrown(() => parseCron(expression, 'UTC')) as CronSyntaxError;
      expect(error).toBeInstanceOf(CronSyntaxError);
      expect(error).toBeInstanceOf(DuetimeError);
      expect(error.code).toBe('DUETIME_CRON_SYNTAX');
      expect(error.name).toBe('CronSyntaxError');
      expect(error.field).toBe(field);
      expect(error.value).toBe(value);
      expect(error.expression).toBe(expression);
      expect(error.reason).toMatch(reason);
      expect(error.message).toContain(JSON.stringify(expression));
      if (field !== 'expression') expect(error.message).toContain(`${field} ${JSON.stringify(value)}`);
      expect(error.message).toMatch(reason);
    });
  }

  it('rejects a non-string expression and an overlong one', () => {
    for (const bad of [undefined, null, 5, ['*'], {}]) {
      const error = thrown(() => parseCron(bad as unknown as string, 'UTC')) as CronSyntaxError;
      expect(error).toBeInstanceOf(CronSyntaxError);
      expect(error.field).toBe('expression');
      expect(error.value).toBe(bad);
      expect(error.reason).toMatch(/must be a string/);
    }
    const long = `${'1,'.repeat(600)}1 * * * *`;
    const error = thrown(() => parseCron(long, 'UTC')) as CronSyntaxError;
    expect(error.reason).toMatch(/longer than 1024 characters/);
    expect(error.message).toMatch(/\(1209 chars\)/);
  });

  it('accepts what the rejections border on', () => {
    for (const ok of [
      '*/59 * * * *',
      '0-59/59 * * * *',
      '0 0 29 2 *',
      '0 0 31 1-12 *',
      '0 0 30 2 MON',
      '0 0 L 2 *',
      '0 0 * * 0/7',
      '0 0 * * FRI-SUN',
    ]) {
      expect(() => parseCron(ok, 'UTC'), ok).not.toThrow();
    }
  });
});

describe('zone bad-input corpus', () => {
  const ZONES: Array<[unknown, RegExp]> = [
    [undefined, /must be a string naming an IANA time zone/],
    [null, /must be a string/],
    [3, /must be a string/],
    ['', /must name an IANA time zone explicitly/],
    ['  ', /must name an IANA time zone explicitly/],
    ['local', /would depend on the host's zone/],
    ['Local', /would depend on the host's zone/],
    ['system', /would depend on the host's zone/],
    ['+02:00', /is not an IANA time zone name/],
    ['UTC+2', /is not an IANA time zone name|not a time zone in this runtime/],
    ['Europe /Berlin', /is not an IANA time zone name/],
    ['Mars/Olympus_Mons', /is not a time zone in this runtime's IANA database/],
    ['Europe/Berlinn', /is not a time zone in this runtime's IANA database/],
  ];
  for (const [zone, reason] of ZONES) {
    it(`parseCron rejects the zone ${JSON.stringify(zone)}`, () => {
      const error = thrown(() => parseCron('* * * * *', zone as string)) as InvalidZoneError;
      expect(error).toBeInstanceOf(InvalidZoneError);
      expect(error).toBeInstanceOf(DuetimeError);
      expect(error.code).toBe('DUETIME_INVALID_ZONE');
      expect(error.field).toBe('zone');
      expect(error.value).toBe(zone);
      expect(error.message).toMatch(reason);
      expect(error.message).toContain(
        `invalid zone ${zone === undefined ? 'undefined' : JSON.stringify(zone)}`,
      );
    });
  }

  it('validateZone names the field it is given and returns the canonical zone', () => {
    const error = thrown(() => validateZone('local', 'options.timeZone')) as InvalidZoneError;
    expect(error.field).toBe('options.timeZone');
    expect(error.message).toMatch(/^invalid options\.timeZone "local"/);
    expect(validateZone('america/new_york', 'zone')).toBe('America/New_York');
    expect(validateZone('US/Eastern', 'zone')).toBe('America/New_York');
    expect(validateZone('Etc/UTC', 'zone')).toBe('UTC');
    expect(validateZone('UTC', 'zone')).toBe('UTC');
    expect(validateZone('Etc/GMT-2', 'zone')).toBe('Etc/GMT-2');
  });
});

describe('argument bad-input corpus', () => {
  const expectInvalid = (fn: () => unknown, field: string, value: unknown, reason: RegExp) => {
    const error = thrown(fn) as InvalidArgumentError;
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.code).toBe('DUETIME_INVALID_ARGUMENT');
    expect(error.field).toBe(field);
    expect(error.value).toStrictEqual(value);
    expect(error.message).toMatch(reason);
    expect(error.message.startsWith(`invalid ${field} `)).toBe(true);
  };

  it('rejects a malformed DST policy', () => {
    expectInvalid(
      () => parseCron('* * * * *', 'UTC', { dst: { gap: 'later' as 'skip' } }),
      'options.dst.gap',
      'later',
      /must be "skip" or "shift"/,
    );
    expectInvalid(
      () => parseCron('* * * * *', 'UTC', { dst: { overlap: 'twice' as 'both' } }),
      'options.dst.overlap',
      'twice',
      /must be "both", "first" or "last"/,
    );
    expectInvalid(
      () => parseCron('* * * * *', 'UTC', { dst: 'skip' as never }),
      'options.dst',
      'skip',
      /must be an object/,
    );
  });

  it('rejects instants that are not valid Dates, eagerly', () => {
    const spec = parseCron('* * * * *', 'UTC');
    expectInvalid(() => spec.next('2026-01-01' as unknown as Date), 'after', '2026-01-01', /must be a Date/);
    const invalid = new Date(Number.NaN);
    expectInvalid(() => spec.prev(invalid), 'before', invalid, /is an invalid Date/);
    expectInvalid(() => spec.occurrences(invalid, new Date()), 'from', invalid, /is an invalid Date/);
    expectInvalid(
      () => interval(1000).occurrences(new Date(), 5 as unknown as Date),
      'to',
      5,
      /must be a Date/,
    );
  });

  it('rejects bad intervals and anchors', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '5', 4e12]) {
      expectInvalid(() => interval(bad as number), 'everyMs', bad, /whole number of milliseconds|at most/);
    }
    const invalid = new Date(Number.NaN);
    expectInvalid(() => intervalFrom(1000, invalid), 'anchor', invalid, /invalid Date/);
    expectInvalid(() => intervalFrom(1000, 0 as unknown as Date), 'anchor', 0, /must be a Date/);
  });

  it('rejects malformed times of day, naming the field', () => {
    for (const bad of ['24:00', '9', '09:60', '09:00:60', '9:5', ' 09:00', '', '09:00:00:00', '-1:00', 900]) {
      expectInvalid(() => parseTimeOfDay(bad as string, 'dailyAt'), 'dailyAt', bad, /"HH:MM" or "HH:MM:SS"/);
    }
    expectInvalid(() => between('25:00', '10:00'), 'between.from', '25:00', /"HH:MM"/);
    expectInvalid(() => between('09:00', '09:00'), 'between.to', '09:00', /equals between\.from/);
  });

  it('rejects bad weekdays, naming the position', () => {
    expectInvalid(() => days(), 'days', [], /at least one weekday/);
    expectInvalid(() => days('FUNDAY'), 'days[0]', 'FUNDAY', /must be a weekday/);
    expectInvalid(() => days(1, 8), 'days[1]', 8, /must be a weekday/);
    expectInvalid(() => days(1.5), 'days[0]', 1.5, /must be a weekday/);
  });

  it('rejects NaN, undefined and non-numbers as epoch milliseconds instead of searching forever', () => {
    // Before: nextMs(NaN) and prevMs(NaN) on a cron spec never returned (the walk's bound was NaN).
    const specs = [
      parseCron('* * * * *', 'Europe/Berlin'),
      interval(1000),
      intervalFrom(60_000, new Date(7)),
    ];
    for (const spec of specs) {
      for (const bad of [Number.NaN, undefined, null, '5', new Date(0)]) {
        expectInvalid(
          () => spec.nextMs(bad as number),
          'afterMs',
          bad,
          /must be a number of epoch milliseconds/,
        );
        expectInvalid(
          () => spec.prevMs(bad as number),
          'beforeMs',
          bad,
          /must be a number of epoch milliseconds/,
        );
      }
      // The infinities stand for "before" and "after" every occurrence.
      expect(Number.isNaN(spec.nextMs(Number.POSITIVE_INFINITY))).toBe(true);
      expect(Number.isNaN(spec.prevMs(Number.NEGATIVE_INFINITY))).toBe(true);
      expect(Number.isFinite(spec.nextMs(Number.NEGATIVE_INFINITY))).toBe(true);
      expect(Number.isFinite(spec.prevMs(Number.POSITIVE_INFINITY))).toBe(true);
    }
  });

  it('rejects instants that are not finite in the zone tables and in wallClock', () => {
    const offsets = zoneOffsets('Europe/Berlin');
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, undefined]) {
      expectInvalid(() => offsets.offsetAt(bad as number), 'utcMs', bad, /must be a finite number/);
      expectInvalid(
        () =>
          offsets.segmentAt(bad as number, { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 }),
        'utcMs',
        bad,
        /must be a finite number/,
      );
    }
    const invalid = new Date(Number.NaN);
    expectInvalid(() => wallClock(invalid, 'UTC'), 'instant', invalid, /is an invalid Date/);
    expectInvalid(() => wallClock(0 as unknown as Date, 'UTC'), 'instant', 0, /must be a Date/);
    expectInvalid(() => days('MON').allows(invalid, 'UTC'), 'instant', invalid, /is an invalid Date/);
  });

  it('refuses parseCron options that are not an object of known options, naming the field', () => {
    const parse = (options: unknown) => () => parseCron('* * * * *', 'UTC', options as never);
    expectInvalid(parse(null), 'options', null, /must be an object \(dst\)/);
    expectInvalid(parse('shift'), 'options', 'shift', /must be an object \(dst\)/);
    expectInvalid(parse(5), 'options', 5, /must be an object/);
    expectInvalid(parse([]), 'options', [], /not an array/);
    expectInvalid(
      parse({ dts: { gap: 'shift' } }),
      'options.dts',
      { gap: 'shift' },
      /is not a parseCron option \(known: dst\)/,
    );
    expectInvalid(parse({ dst: [] }), 'options.dst', [], /not an array/);
    expectInvalid(parse({ dst: null }), 'options.dst', null, /must be an object \(gap, overlap\)/);
    expectInvalid(
      parse({ dst: { gaps: 'shift' } }),
      'options.dst.gaps',
      'shift',
      /is not a DST policy field/,
    );
    // What the rejections border on.
    expect(parseCron('* * * * *', 'UTC', undefined).dst).toEqual({ gap: 'skip', overlap: 'both' });
    expect(parseCron('* * * * *', 'UTC', {}).dst).toEqual({ gap: 'skip', overlap: 'both' });
    expect(parseCron('* * * * *', 'UTC', { dst: undefined }).dst).toEqual({ gap: 'skip', overlap: 'both' });
    expect(parseCron('* * * * *', 'UTC', { dst: { gap: 'shift' } }).dst).toEqual({
      gap: 'shift',
      overlap: 'both',
    });
  });

  it('turns options that throw when read (a Proxy trap, a getter) into a typed error', () => {
    const boom = () => {
      throw new Error('trap exploded');
    };
    const traps = [
      new Proxy({}, { ownKeys: boom }),
      new Proxy({ dst: {} }, { get: boom }),
      new Proxy({}, { ownKeys: boom, get: boom, getPrototypeOf: boom, getOwnPropertyDescriptor: boom }),
      Object.defineProperty({}, 'dst', { enumerable: true, get: boom }),
    ];
    for (const options of traps) {
      const error = thrown(() => parseCron('* * * * *', 'UTC', options as never)) as InvalidArgumentError;
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.code).toBe('DUETIME_INVALID_ARGUMENT');
      expect(error.field).toBe('options');
      expect(error.message).toMatch(/could not be read \(its (keys|key "dst") threw: trap exploded\)/);
      expect((error.cause as Error).message).toBe('trap exploded');
    }
    const nested = thrown(() =>
      parseCron('* * * * *', 'UTC', { dst: new Proxy({}, { ownKeys: boom }) }),
    ) as InvalidArgumentError;
    expect(nested).toBeInstanceOf(InvalidArgumentError);
    expect(nested.field).toBe('options.dst');
  });
});
