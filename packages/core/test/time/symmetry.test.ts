import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CronSyntaxError, type DstPolicy, parseCron } from '../../src/index.js';
import { cronExpression, cronExpressionAround } from './cron-arbitrary.js';
import { transitionsBetween } from './oracles.js';

const POLICIES: DstPolicy[] = (['skip', 'shift'] as const).flatMap((gap) =>
  (['both', 'first', 'last'] as const).map((overlap) => ({ gap, overlap })),
);
const ZONES = [
  'UTC',
  'America/New_York',
  'Europe/London',
  'Australia/Lord_Howe',
  'Pacific/Chatham',
  'America/Santiago',
  'America/Havana',
  'Asia/Kolkata',
];

/**
 * next() and prev() describe the same set of instants: for any start s with n = next(s), there is no
 * occurrence in (s, n), so prev(n) is at most s and next(prev(n)) is n again; and the other way round.
 */
function checkSymmetry(expression: string, zone: string, policy: DstPolicy, start: Date): void {
  let spec: ReturnType<typeof parseCron>;
  try {
    spec = parseCron(expression, zone, { dst: policy });
  } catch (error) {
    expect(error).toBeInstanceOf(CronSyntaxError);
    return;
  }
  const label = `${expression} ${zone} ${policy.gap}/${policy.overlap} from ${start.toISOString()}`;
  const n = spec.next(start);
  if (n !== undefined) {
    expect(n.getTime(), label).toBeGreaterThan(start.getTime());
    const p = spec.prev(n);
    if (p !== undefined) {
      expect(p.getTime(), label).toBeLessThanOrEqual(start.getTime());
      expect(spec.next(p)?.toISOString(), label).toBe(n.toISOString());
    }
  }
  const b = spec.prev(start);
  if (b !== undefined) {
    expect(b.getTime(), label).toBeLessThan(start.getTime());
    const f = spec.next(b);
    expect(f, label).toBeDefined();
    expect((f as Date).getTime(), label).toBeGreaterThanOrEqual(start.getTime());
    expect(spec.prev(f as Date)?.toISOString(), label).toBe(b.toISOString());
  }
}

describe('next/prev symmetry', () => {
  it('holds for generated expressions, zones, policies and starts', () => {
    fc.assert(
      fc.property(
        cronExpression(),
        fc.constantFrom(...ZONES),
        fc.constantFrom(...POLICIES),
        fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2040, 0, 1) }).map((t) => new Date(t)),
        checkSymmetry,
      ),
      { numRuns: 600, seed: 31 },
    );
  });

  it('holds around transitions for expressions aimed at the hours they remove or repeat', () => {
    const cases = fc
      .constantFrom(...ZONES.filter((z) => z !== 'UTC' && z !== 'Asia/Kolkata'))
      .chain((zone) =>
        fc.tuple(
          fc.constant(zone),
          fc.constantFrom(...transitionsBetween(zone, Date.UTC(2020, 0, 1), Date.UTC(2030, 0, 1))),
        ),
      )
      .chain(([zone, t]) =>
        fc.tuple(
          fc.constant(zone),
          fc.integer({ min: -6 * 3600, max: 6 * 3600 }).map((s) => new Date(t + s * 1000)),
          fc.integer({ min: 0, max: 23 }).chain((h) => cronExpressionAround(h)),
          fc.constantFrom(...POLICIES),
        ),
      );
    fc.assert(
      fc.property(cases, ([zone, start, expression, policy]) =>
        checkSymmetry(expression, zone, policy, start),
      ),
      { numRuns: 1000, seed: 32 },
    );
  });
});
