import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CronSyntaxError, type DstPolicy, parseCron, wallClock } from '../../src/index.js';
import { cronExpression, cronExpressionAround } from './cron-arbitrary.js';
import {
  type CronCase,
  cronerEquivalentPolicy,
  cronerNext,
  cronerPrev,
  cronParserNext,
  cronParserPrev,
  DIVERGENCES,
  divergencesFor,
  transitionsBetween,
} from './oracles.js';

/**
 * duetime against croner and cron-parser on generated expressions. Each case is compared with each
 * library unless a divergence listed in oracles.ts covers it; the counters below prove that most cases are
 * really compared (a generator that produced only excluded cases would fail here, not pass silently).
 */

const NO_DST_ZONES = ['UTC', 'Asia/Kolkata', 'Asia/Tokyo', 'Etc/GMT+5'];
const DST_ZONES = ['America/New_York', 'Europe/Berlin', 'Australia/Sydney', 'America/Sao_Paulo'];
const COUNT = 4;
const FROM = Date.UTC(2000, 0, 1);
const TO = Date.UTC(2040, 0, 1);

const TRANSITION_ZONES = [
  'America/New_York',
  'Europe/London',
  'Australia/Lord_Howe',
  'Pacific/Chatham',
  'America/Santiago',
  'America/Havana',
  'America/St_Johns',
];

/** Starts from two days before to a few hours after a UTC-offset transition of the zone. */
function nearTransition(zone: string): fc.Arbitrary<Date> {
  const transitions = transitionsBetween(zone, Date.UTC(2015, 0, 1), Date.UTC(2030, 0, 1));
  return fc
    .tuple(fc.constantFrom(...transitions), fc.integer({ min: -48 * 3600, max: 6 * 3600 }))
    .map(([t, s]) => new Date(t + s * 1000));
}

const startArbitrary = fc
  .tuple(fc.integer({ min: FROM / 1000, max: TO / 1000 }), fc.constantFrom(0, 0, 0, 1, 500, 999))
  .map(([s, ms]) => new Date(s * 1000 + ms));

interface Tally {
  compared: number;
  excluded: Map<string, number>;
  neverMatches: number;
}

function newTally(): Tally {
  return { compared: 0, excluded: new Map(), neverMatches: 0 };
}

/** Parses with duetime; undefined when the expression is rejected as never matching (checked to be so). */
function ours(expression: string, zone: string, dst?: DstPolicy) {
  try {
    return parseCron(expression, zone, dst ? { dst } : {});
  } catch (error) {
    expect(error).toBeInstanceOf(CronSyntaxError);
    expect((error as CronSyntaxError).reason).toMatch(/never matches/);
    return undefined;
  }
}

function walk(step: (at: number) => number, start: number, count: number): number[] {
  const out: number[] = [];
  let at = start;
  for (let i = 0; i < count; i++) {
    at = step(at);
    if (Number.isNaN(at)) break;
    out.push(at);
  }
  return out;
}

const iso = (list: number[]) => list.map((t) => new Date(t).toISOString());

function compare(
  library: 'croner' | 'cron-parser',
  direction: 'next' | 'prev',
  zones: string[],
  runs: number,
  seed: number,
  nearTransitions = false,
): Tally {
  const tally = newTally();
  const zoneAndStart = fc
    .constantFrom(...zones)
    .chain((zone) => fc.tuple(fc.constant(zone), nearTransitions ? nearTransition(zone) : startArbitrary));
  fc.assert(
    fc.property(cronExpression(), zoneAndStart, (expression, [zone, start]) => {
      const policy = library === 'croner' ? cronerEquivalentPolicy(expression) : undefined;
      const spec = ours(expression, zone, policy);
      if (spec === undefined) {
        tally.neverMatches++;
        return;
      }
      const expected =
        direction === 'next'
          ? walk((t) => spec.nextMs(t), start.getTime(), COUNT)
          : walk((t) => spec.prevMs(t), start.getTime(), COUNT);
      const c: CronCase = {
        expression,
        zone,
        start,
        spanEnd: expected[expected.length - 1] ?? start.getTime(),
      };
      const skipped = divergencesFor(library, c);
      if (skipped.length > 0) {
        for (const d of skipped) tally.excluded.set(d.id, (tally.excluded.get(d.id) ?? 0) + 1);
        return;
      }
      const dayRule = spec.describe().dayRule;
      const actual =
        library === 'croner'
          ? direction === 'next'
            ? cronerNext(c, COUNT, dayRule)
            : cronerPrev(c, COUNT, dayRule)
          : direction === 'next'
            ? cronParserNext(c, COUNT)
            : cronParserPrev(c, COUNT);
      expect({ expression, zone, start: start.toISOString(), times: iso(actual) }).toEqual({
        expression,
        zone,
        start: start.toISOString(),
        times: iso(expected),
      });
      tally.compared++;
    }),
    { numRuns: runs, seed },
  );
  return tally;
}

/** Exclusions stay a minority share of the generated cases, so the comparison is real. */
function expectCompared(tally: Tally, runs: number, share: number): void {
  expect(tally.compared, JSON.stringify([...tally.excluded])).toBeGreaterThan(runs * share);
}

describe('differential: duetime against croner', () => {
  it('agrees on next() in zones without DST', () => {
    const tally = compare('croner', 'next', NO_DST_ZONES, 700, 11);
    expectCompared(tally, 700, 0.9);
  });

  it('agrees on next() in DST zones, with the policy that matches croner (fixed-time: shift/first, else skip/both)', () => {
    const tally = compare('croner', 'next', DST_ZONES, 700, 12);
    expectCompared(tally, 700, 0.9);
  });

  it('agrees on next() right around transitions (30-minute, 45-minute and midnight DST included)', () => {
    const tally = compare('croner', 'next', TRANSITION_ZONES, 600, 14, true);
    expectCompared(tally, 600, 0.9);
  });

  for (const direction of ['next', 'prev'] as const) {
    it(`agrees on ${direction}() for expressions aimed at the gap or overlap of a transition`, () => {
      // The hours that a transition removes or repeats: the wall-clock hour just before it and just after it.
      const around = fc
        .constantFrom(...TRANSITION_ZONES)
        .chain((zone) =>
          fc.tuple(
            fc.constant(zone),
            fc.constantFrom(...transitionsBetween(zone, Date.UTC(2015, 0, 1), Date.UTC(2030, 0, 1))),
          ),
        )
        .chain(([zone, t]) => {
          const hours = [wallClock(new Date(t - 1), zone).hour, wallClock(new Date(t), zone).hour];
          const offset =
            direction === 'next'
              ? fc.integer({ min: -30 * 3600, max: 3600 })
              : fc.integer({ min: -3600, max: 30 * 3600 });
          return fc.tuple(
            fc.constant(zone),
            offset.map((s) => new Date(t + s * 1000)),
            fc.constantFrom(...hours).chain((hour) => cronExpressionAround(hour)),
          );
        });
      let compared = 0;
      fc.assert(
        fc.property(around, ([zone, start, expression]) => {
          const spec = parseCron(expression, zone, { dst: cronerEquivalentPolicy(expression) });
          const expected =
            direction === 'next'
              ? walk((t) => spec.nextMs(t), start.getTime(), COUNT)
              : walk((t) => spec.prevMs(t), start.getTime(), COUNT);
          const c: CronCase = { expression, zone, start, spanEnd: expected[COUNT - 1] as number };
          if (divergencesFor('croner', c).length > 0) return;
          const actual = direction === 'next' ? cronerNext(c, COUNT, 'or') : cronerPrev(c, COUNT, 'or');
          expect({ expression, zone, start: start.toISOString(), times: iso(actual) }).toEqual({
            expression,
            zone,
            start: start.toISOString(),
            times: iso(expected),
          });
          compared++;
        }),
        { numRuns: 400, seed: direction === 'next' ? 15 : 16 },
      );
      expect(compared).toBe(400);
    });
  }

  it('agrees on prev() in zones without DST', () => {
    const tally = compare('croner', 'prev', NO_DST_ZONES, 300, 13);
    expectCompared(tally, 300, 0.9);
  });
});

// Two cron-parser divergences are common in generated expressions (overlapping list items, "*/n" day
// fields), so about half of the cases reach the comparison; the run counts make up for it.
describe('differential: duetime against cron-parser', () => {
  it('agrees on next() in zones without DST', () => {
    const tally = compare('cron-parser', 'next', NO_DST_ZONES, 900, 21);
    expectCompared(tally, 900, 0.45);
  });

  it('agrees on next() in DST zones away from transitions', () => {
    const tally = compare('cron-parser', 'next', DST_ZONES, 400, 22);
    expectCompared(tally, 400, 0.25);
  });

  it('agrees on prev() in zones without DST', () => {
    const tally = compare('cron-parser', 'prev', NO_DST_ZONES, 400, 23);
    expectCompared(tally, 400, 0.45);
  });
});

describe('known divergences', () => {
  it('each listed divergence is real: the library differs from duetime on its example', () => {
    const examples: Record<string, CronCase> = {
      'day-rule-star-prefix': {
        expression: '0 0 */2 * MON',
        zone: 'UTC',
        start: new Date('2026-03-01T00:00:00Z'),
        spanEnd: 0,
      },
      'dst-transition': {
        expression: '30 2 * * *',
        zone: 'America/New_York',
        start: new Date('2026-03-07T12:00:00Z'),
        spanEnd: Date.parse('2026-03-10T12:00:00Z'),
      },
      'croner-open-step-weekday': {
        expression: '0 0 * * 1/2',
        zone: 'UTC',
        start: new Date('2026-03-01T00:00:00Z'),
        spanEnd: 0,
      },
      'sunday-to-sunday': {
        expression: '0 0 1 * SUN-SUN',
        zone: 'UTC',
        start: new Date('2026-03-01T00:00:00Z'),
        spanEnd: 0,
      },
      'duplicate-list-values': {
        expression: '0 0 1-9,1 * *',
        zone: 'UTC',
        start: new Date('2026-03-01T00:00:00Z'),
        spanEnd: 0,
      },
      'sunday-as-range-end': {
        expression: '0 0 * * FRI-SUN',
        zone: 'UTC',
        start: new Date('2026-03-01T00:00:00Z'),
        spanEnd: 0,
      },
    };
    for (const divergence of DIVERGENCES) {
      const c = examples[divergence.id] as CronCase;
      expect(divergence.applies(c), divergence.id).toBe(true);
      const spec = parseCron(c.expression, c.zone);
      const expected = iso(walk((t) => spec.nextMs(t), c.start.getTime(), COUNT));
      let actual: string[] | string;
      try {
        actual = iso(
          divergence.library === 'croner'
            ? cronerNext(c, COUNT, spec.describe().dayRule)
            : cronParserNext(c, COUNT),
        );
      } catch (error) {
        actual = `rejected: ${(error as Error).message}`;
      }
      expect(actual, divergence.id).not.toEqual(expected);
    }
  });
});
