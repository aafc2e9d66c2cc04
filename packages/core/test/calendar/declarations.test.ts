import { describe, expect, it } from 'vitest';
import {
  between,
  CronSyntaxError,
  calendar,
  cron,
  type Declaration,
  DuetimeError,
  days,
  define,
  every,
  InvalidArgumentError,
  InvalidZoneError,
  intervalFrom,
  Reason,
  Registry,
  State,
  unlessBetween,
} from '../../src/index.js';

const noop = () => {};
const next = (d: Declaration, after: string) => d.spec.next(new Date(after))?.toISOString();

describe('declarations', () => {
  it('builds the calendar shortcuts as cron specs in the calendar zone', () => {
    const berlin = calendar('Europe/Berlin');
    const cases: [Declaration, string][] = [
      [berlin.daily('d', noop), '0 0 * * *'],
      [berlin.dailyAt('da', '13:30', noop), '30 13 * * *'],
      [berlin.dailyAt('das', '13:30:15', noop), '15 30 13 * * *'],
      [berlin.hourly('h', noop), '0 * * * *'],
      [berlin.weekly('w', noop), '0 0 * * 0'],
      [berlin.monthly('m', noop), '0 0 1 * *'],
      [berlin.everyMinute('m1', noop), '* * * * *'],
      [berlin.everyFiveMinutes('m5', noop), '*/5 * * * *'],
      [berlin.everyTenMinutes('m10', noop), '*/10 * * * *'],
      [berlin.everyFifteenMinutes('m15', noop), '*/15 * * * *'],
      [berlin.everyThirtyMinutes('m30', noop), '*/30 * * * *'],
      [berlin.lastDayOfMonthAt('ldm', '17:00', noop), '0 17 L * *'],
      [berlin.cron('c', '0 9 * * MON-FRI', noop), '0 9 * * MON-FRI'],
    ];
    for (const [declaration, expression] of cases) {
      expect(declaration.describe().spec).toMatchObject({
        kind: 'cron',
        expression,
        timeZone: 'Europe/Berlin',
      });
      expect(declaration.source.kind).toBe('cron');
    }
    expect(next(berlin.dailyAt('x', '13:30', noop), '2026-07-01T00:00:00Z')).toBe('2026-07-01T11:30:00.000Z');
    expect(next(berlin.lastDayOfMonthAt('y', '17:00', noop), '2026-02-01T00:00:00Z')).toBe(
      '2026-02-28T16:00:00.000Z',
    );
    expect(next(berlin.in('America/New_York').dailyAt('z', '09:00', noop), '2026-07-01T00:00:00Z')).toBe(
      '2026-07-01T13:00:00.000Z',
    );
  });

  it('builds standalone cron, every and define declarations', () => {
    expect(next(cron('c', '*/15 * * * *', 'UTC', noop), '2026-01-01T00:01:00Z')).toBe(
      '2026-01-01T00:15:00.000Z',
    );
    const e = every('e', 90_000, noop);
    expect(e.describe().spec).toMatchObject({ kind: 'interval', everyMs: 90_000 });
    expect(next(e, '2026-01-01T00:00:00Z')).toBe('2026-01-01T00:01:30.000Z');
    const d = define('d', intervalFrom(3_600_000, new Date('2026-01-01T00:15:00Z')), noop, { timeout: 1000 });
    expect(next(d, '2026-01-01T03:00:00Z')).toBe('2026-01-01T03:15:00.000Z');
    expect(d.options.timeout).toBe(1000);
  });

  it('is frozen, refines with with() without touching the original, and does no I/O', () => {
    const base = every('e', 1000, noop);
    const refined = base.with({ timeout: 500 }).with({ withoutOverlap: true, catchUp: { window: 60_000 } });
    expect(Object.isFrozen(base)).toBe(true);
    expect(Object.isFrozen(base.options)).toBe(true);
    expect(base.options.timeout).toBeUndefined();
    expect(refined.options).toMatchObject({
      timeout: 500,
      withoutOverlap: true,
      catchUp: { window: 60_000, max: 10 },
    });
    expect(() => {
      (base as unknown as { id: string }).id = 'x';
    }).toThrow(TypeError);
  });

  it('re-parses a cron declaration when with() changes its DST policy', () => {
    const plain = calendar('Europe/Berlin').dailyAt('d', '02:30', noop);
    const shifted = plain.with({ dst: { gap: 'shift' } });
    // 29 March 2026: 02:30 does not exist in Berlin; `shift` fires at the first instant after the gap.
    expect(next(plain, '2026-03-29T00:00:00Z')).toBe('2026-03-30T00:30:00.000Z');
    expect(next(shifted, '2026-03-29T00:00:00Z')).toBe('2026-03-29T01:00:00.000Z');
  });

  it('describes declarations and registries as JSON-safe data, without callbacks', () => {
    const registry = new Registry(
      calendar('UTC')
        .dailyAt('report', '09:00', noop)
        .with({
          timeout: 1000,
          withoutOverlap: true,
          environments: ['production'],
          catchUp: { window: 3_600_000, max: 2 },
          days: days('MON', 'FRI'),
          between: between('08:00', '18:00'),
          unlessBetween: ['12:00', '13:00'],
          lastDayOfMonth: true,
          when: () => true,
          evenInMaintenanceMode: true,
          before: noop,
          after: noop,
          failed: noop,
        }),
      every('tick', 1000, noop),
    );
    const description = registry.describe();
    expect(JSON.parse(JSON.stringify(description))).toEqual(description);
    expect(description[0]?.options).toEqual({
      timeout: 1000,
      withoutOverlap: true,
      overlapTTL: 30_000,
      environments: ['production'],
      catchUp: { window: 3_600_000, max: 2 },
      windows: [
        { kind: 'days', days: [1, 5] },
        { kind: 'between', from: '08:00:00', to: '18:00:00' },
        { kind: 'unlessBetween', from: '12:00:00', to: '13:00:00' },
        { kind: 'lastDayOfMonth' },
      ],
      when: true,
      evenInMaintenanceMode: true,
      hooks: ['before', 'after', 'failed'],
    });
    expect(registry.ids()).toEqual(['report', 'tick']);
    expect(registry.size).toBe(2);
    expect(registry.get('tick')?.id).toBe('tick');
    expect([...registry].map((d) => d.id)).toEqual(['report', 'tick']);
    expect(registry.with(every('more', 1000, noop)).size).toBe(3);
  });

  it('rejects duplicate ids with DUETIME_DUPLICATE_ID', () => {
    const attempt = () => new Registry(every('same', 1000, noop), calendar('UTC').daily('same', noop));
    expect(attempt).toThrow(DuetimeError);
    try {
      attempt();
    } catch (error) {
      expect(error).toMatchObject({
        code: 'DUETIME_DUPLICATE_ID',
        value: 'same',
        field: 'declarations[1].id',
      });
    }
    expect(() => new Registry(every('a', 1000, noop)).with(every('a', 2000, noop))).toThrow(
      /duplicate schedule id "a"/,
    );
    expect(() => new Registry({ id: 'fake' } as never)).toThrow(/declarations\[0\]/);
  });

  it('rejects bad input at declaration time, naming the field and the value', () => {
    const utc = calendar('UTC');
    const cases: [() => unknown, new (...args: never[]) => Error, RegExp][] = [
      [() => every('', 1000, noop), InvalidArgumentError, /invalid id "": .*must not be empty/],
      [() => every('x'.repeat(201), 1000, noop), InvalidArgumentError, /invalid id/],
      [() => every('e', 0, noop), InvalidArgumentError, /invalid every 0: must be positive/],
      [() => every('e', -5, noop), InvalidArgumentError, /invalid every -5/],
      [() => every('e', 1.5, noop), InvalidArgumentError, /invalid every 1\.5/],
      [() => every('e', 1000, 'nope' as never), InvalidArgumentError, /invalid handler "nope"/],
      [() => calendar('Mars/Olympus'), InvalidZoneError, /invalid zone "Mars\/Olympus"/],
      [() => calendar('local'), InvalidZoneError, /invalid zone "local"/],
      [() => cron('c', '* * * * *', 'Nowhere/City', noop), InvalidZoneError, /invalid zone "Nowhere\/City"/],
      [() => cron('c', '61 * * * *', 'UTC', noop), CronSyntaxError, /61/],
      [() => utc.cron('c', '0 0 30 2 *', noop), CronSyntaxError, /0 0 30 2/],
      [() => utc.dailyAt('d', '25:00', noop), InvalidArgumentError, /invalid time "25:00"/],
      [() => utc.dailyAt('d', '9am', noop), InvalidArgumentError, /invalid time "9am"/],
      [() => utc.lastDayOfMonthAt('d', '17:60', noop), InvalidArgumentError, /invalid time "17:60"/],
      [() => every('e', 1000, noop).with({ timeout: 0 }), InvalidArgumentError, /options\.timeout 0/],
      [() => every('e', 1000, noop).with({ timeout: -1 }), InvalidArgumentError, /options\.timeout -1/],
      [() => every('e', 1000, noop).with({ overlapTTL: -1 }), InvalidArgumentError, /options\.overlapTTL -1/],
      [
        () => every('e', 1000, noop).with({ catchUp: { max: 3 } as never }),
        InvalidArgumentError,
        /options\.catchUp\.window undefined: is required/,
      ],
      [
        () => every('e', 1000, noop).with({ catchUp: { window: 0 } }),
        InvalidArgumentError,
        /options\.catchUp\.window 0/,
      ],
      [
        () => every('e', 1000, noop).with({ catchUp: { window: 1000, max: 0 } }),
        InvalidArgumentError,
        /options\.catchUp\.max 0/,
      ],
      [
        () => every('e', 1000, noop).with({ between: ['nine', '17:00'] }),
        InvalidArgumentError,
        /between\.from "nine"/,
      ],
      [
        () => every('e', 1000, noop).with({ between: [9, 17] as never }),
        InvalidArgumentError,
        /options\.between\[0\] 9/,
      ],
      [
        () => every('e', 1000, noop).with({ between: 'day' as never }),
        InvalidArgumentError,
        /options\.between "day"/,
      ],
      [
        () => every('e', 1000, noop).with({ unlessBetween: ['22:00', '22:00'] }),
        InvalidArgumentError,
        /unlessBetween\.to "22:00"/,
      ],
      [() => every('e', 1000, noop).with({ days: ['Moonday'] }), InvalidArgumentError, /days\[0\] "Moonday"/],
      [
        () => every('e', 1000, noop).with({ environments: [] }),
        InvalidArgumentError,
        /options\.environments \[\]/,
      ],
      [
        () => every('e', 1000, noop).with({ when: true as never }),
        InvalidArgumentError,
        /options\.when true/,
      ],
      [
        () => every('e', 1000, noop).with({ dst: { gap: 'shift' } }),
        InvalidArgumentError,
        /options\.dst .*only to cron/,
      ],
      [
        () => utc.daily('d', noop).with({ dst: { gap: 'later' as never } }),
        InvalidArgumentError,
        /options\.dst\.gap "later"/,
      ],
      [
        () => every('e', 1000, noop).with({ timout: 5 } as never),
        InvalidArgumentError,
        /options\.timout 5: is not a schedule option/,
      ],
      [() => define('d', { next: noop } as never, noop), InvalidArgumentError, /invalid spec/],
      [
        () => every('e', 1000, noop).with({ catchUp: { window: 1000, maxx: 3 } as never }),
        InvalidArgumentError,
        /options\.catchUp\.maxx 3: is not a catchUp field/,
      ],
      [
        () => utc.daily('d', noop).with({ dst: [] as never }),
        InvalidArgumentError,
        /options\.dst \[\]: must be an object .*not an array/,
      ],
      [
        () => utc.daily('d', noop, { dst: { gaps: 'shift' } as never }),
        InvalidArgumentError,
        /options\.dst\.gaps "shift": is not a DST policy field/,
      ],
      [() => every('e', 1000, noop, null as never), InvalidArgumentError, /options null: must be an object/],
      [
        () => every('e', 1000, noop, { catchUp: { window: 1000, onFirstStart: 'yes' as never } }),
        InvalidArgumentError,
        /options\.catchUp\.onFirstStart "yes": must be true or false/,
      ],
    ];
    for (const [attempt, type, message] of cases) {
      expect(attempt, String(message)).toThrow(type);
      expect(attempt, String(message)).toThrow(message);
    }
    expect(() => unlessBetween('08:00', '8:00')).toThrow(/unlessBetween\.to/);
  });

  it('turns options that throw when read (a Proxy trap, a getter) into a typed error naming options', () => {
    const boom = () => {
      throw new Error('trap exploded');
    };
    const trapped = new Proxy({}, { ownKeys: boom, get: boom, getPrototypeOf: boom });
    const getter = Object.defineProperty({}, 'timeout', { enumerable: true, get: boom });
    const attempts = [
      () => every('e', 1000, noop, trapped as never),
      () => every('e', 1000, noop).with(trapped as never),
      () => calendar('UTC').daily('d', noop, trapped as never),
      () => calendar('UTC').daily('d', noop, getter as never),
      () => every('e', 1000, noop, { catchUp: trapped } as never),
    ];
    for (const attempt of attempts) {
      let error: unknown;
      try {
        attempt();
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toMatch(/^options(\.catchUp)?$/);
      expect((error as InvalidArgumentError).message).toMatch(/could not be read .*trap exploded/);
    }
  });

  it('lists the states and reasons records carry', () => {
    expect(Object.values(State)).toEqual(['running', 'succeeded', 'failed', 'cancelled', 'skipped']);
    expect(Object.values(Reason).sort()).toEqual(
      [
        'handler_failed',
        'hook_failed',
        'panicked',
        'timed_out',
        'stopped',
        'leadership_lost',
        'overlap_lost',
        'overlap_busy',
        'coordination_failed',
        'capacity_reached',
        'missed',
        'backlog_limited',
        'clock_failed',
        'filtered',
      ].sort(),
    );
  });
});
