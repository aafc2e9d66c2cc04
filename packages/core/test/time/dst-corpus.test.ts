import { describe, expect, it } from 'vitest';
import { type DstPolicy, parseCron, parseCronFields, wallClock } from '../../src/index.js';
import { luxonTransitions, reference, scanWindow } from './dst-oracle.js';

const POLICIES: DstPolicy[] = (['skip', 'shift'] as const).flatMap((gap) =>
  (['both', 'first', 'last'] as const).map((overlap) => ({ gap, overlap })),
);
const policyName = (p: DstPolicy) => `${p.gap}/${p.overlap}`;
const iso = (list: Array<number | Date>) =>
  list.map((t) => new Date(t).toISOString().replace(':00.000Z', 'Z'));

function nextThree(expression: string, zone: string, after: string, dst: DstPolicy): string[] {
  const spec = parseCron(expression, zone, { dst });
  const out: Date[] = [];
  let at = new Date(after);
  for (let i = 0; i < 3; i++) {
    at = spec.next(at) as Date;
    out.push(at);
  }
  return iso(out);
}

/**
 * Worked examples, one per kind of transition, with the expected instants written out by hand.
 * A gap case lists its results for `skip` and `shift` (the overlap policy cannot matter); an overlap case
 * for `both`, `first` and `last` (the gap policy cannot matter). Each is checked under all six policies.
 */
interface GapCase {
  zone: string;
  expression: string;
  after: string;
  why: string;
  skip: string[];
  shift: string[];
}
interface OverlapCase {
  zone: string;
  expression: string;
  after: string;
  why: string;
  both: string[];
  first: string[];
  last: string[];
}

const GAPS: GapCase[] = [
  {
    zone: 'America/New_York',
    expression: '30 2 * * *',
    after: '2026-03-08T00:00Z',
    why: '02:00 EST jumps to 03:00 EDT on 8 March',
    skip: ['2026-03-09T06:30Z', '2026-03-10T06:30Z', '2026-03-11T06:30Z'],
    shift: ['2026-03-08T07:00Z', '2026-03-09T06:30Z', '2026-03-10T06:30Z'],
  },
  {
    zone: 'Europe/London',
    expression: '30 1 * * *',
    after: '2026-03-29T00:00Z',
    why: '01:00 GMT jumps to 02:00 BST on 29 March',
    skip: ['2026-03-30T00:30Z', '2026-03-31T00:30Z', '2026-04-01T00:30Z'],
    shift: ['2026-03-29T01:00Z', '2026-03-30T00:30Z', '2026-03-31T00:30Z'],
  },
  {
    zone: 'Europe/Berlin',
    expression: '30 2 * * *',
    after: '2026-03-29T00:00Z',
    why: '02:00 CET jumps to 03:00 CEST on 29 March',
    skip: ['2026-03-30T00:30Z', '2026-03-31T00:30Z', '2026-04-01T00:30Z'],
    shift: ['2026-03-29T01:00Z', '2026-03-30T00:30Z', '2026-03-31T00:30Z'],
  },
  {
    zone: 'Australia/Lord_Howe',
    expression: '15 2 * * *',
    after: '2026-10-03T00:00Z',
    why: 'a 30-minute gap: 02:00 (+10:30) jumps to 02:30 (+11) on 4 October',
    skip: ['2026-10-04T15:15Z', '2026-10-05T15:15Z', '2026-10-06T15:15Z'],
    shift: ['2026-10-03T15:30Z', '2026-10-04T15:15Z', '2026-10-05T15:15Z'],
  },
  {
    zone: 'America/Santiago',
    expression: '0 0 * * *',
    after: '2026-09-05T12:00Z',
    why: 'midnight does not exist on 6 September: 00:00 (-04) jumps to 01:00 (-03)',
    skip: ['2026-09-07T03:00Z', '2026-09-08T03:00Z', '2026-09-09T03:00Z'],
    shift: ['2026-09-06T04:00Z', '2026-09-07T03:00Z', '2026-09-08T03:00Z'],
  },
  {
    zone: 'America/Havana',
    expression: '0 0 * * *',
    after: '2026-03-07T12:00Z',
    why: 'midnight does not exist on 8 March: 00:00 (-05) jumps to 01:00 (-04)',
    skip: ['2026-03-09T04:00Z', '2026-03-10T04:00Z', '2026-03-11T04:00Z'],
    shift: ['2026-03-08T05:00Z', '2026-03-09T04:00Z', '2026-03-10T04:00Z'],
  },
  {
    zone: 'Pacific/Chatham',
    expression: '0 3 * * *',
    after: '2026-09-26T00:00Z',
    why: 'a gap at a 45-minute offset: 02:45 (+12:45) jumps to 03:45 (+13:45) on 27 September',
    skip: ['2026-09-27T13:15Z', '2026-09-28T13:15Z', '2026-09-29T13:15Z'],
    shift: ['2026-09-26T14:00Z', '2026-09-27T13:15Z', '2026-09-28T13:15Z'],
  },
  {
    zone: 'Asia/Kolkata',
    expression: '30 2 * * *',
    after: '2026-03-08T00:00Z',
    why: 'no DST: every policy gives the same instants (+05:30)',
    skip: ['2026-03-08T21:00Z', '2026-03-09T21:00Z', '2026-03-10T21:00Z'],
    shift: ['2026-03-08T21:00Z', '2026-03-09T21:00Z', '2026-03-10T21:00Z'],
  },
];

const OVERLAPS: OverlapCase[] = [
  {
    zone: 'America/New_York',
    expression: '30 1 * * *',
    after: '2026-11-01T00:00Z',
    why: '02:00 EDT falls back to 01:00 EST on 1 November: 01:30 happens twice',
    both: ['2026-11-01T05:30Z', '2026-11-01T06:30Z', '2026-11-02T06:30Z'],
    first: ['2026-11-01T05:30Z', '2026-11-02T06:30Z', '2026-11-03T06:30Z'],
    last: ['2026-11-01T06:30Z', '2026-11-02T06:30Z', '2026-11-03T06:30Z'],
  },
  {
    zone: 'Europe/London',
    expression: '30 1 * * *',
    after: '2026-10-25T00:00Z',
    why: '02:00 BST falls back to 01:00 GMT on 25 October',
    both: ['2026-10-25T00:30Z', '2026-10-25T01:30Z', '2026-10-26T01:30Z'],
    first: ['2026-10-25T00:30Z', '2026-10-26T01:30Z', '2026-10-27T01:30Z'],
    last: ['2026-10-25T01:30Z', '2026-10-26T01:30Z', '2026-10-27T01:30Z'],
  },
  {
    zone: 'Europe/Berlin',
    expression: '30 2 * * *',
    after: '2026-10-25T00:00Z',
    why: '03:00 CEST falls back to 02:00 CET on 25 October',
    both: ['2026-10-25T00:30Z', '2026-10-25T01:30Z', '2026-10-26T01:30Z'],
    first: ['2026-10-25T00:30Z', '2026-10-26T01:30Z', '2026-10-27T01:30Z'],
    last: ['2026-10-25T01:30Z', '2026-10-26T01:30Z', '2026-10-27T01:30Z'],
  },
  {
    zone: 'Australia/Lord_Howe',
    expression: '45 1 * * *',
    after: '2026-04-04T00:00Z',
    why: 'a 30-minute overlap: 02:00 (+11) falls back to 01:30 (+10:30) on 5 April',
    both: ['2026-04-04T14:45Z', '2026-04-04T15:15Z', '2026-04-05T15:15Z'],
    first: ['2026-04-04T14:45Z', '2026-04-05T15:15Z', '2026-04-06T15:15Z'],
    last: ['2026-04-04T15:15Z', '2026-04-05T15:15Z', '2026-04-06T15:15Z'],
  },
  {
    zone: 'America/Santiago',
    expression: '30 23 * * *',
    after: '2026-04-04T12:00Z',
    why: 'midnight (-03) falls back to 23:00 (-04) of the previous day on 5 April: 23:30 on 4 April twice',
    both: ['2026-04-05T02:30Z', '2026-04-05T03:30Z', '2026-04-06T03:30Z'],
    first: ['2026-04-05T02:30Z', '2026-04-06T03:30Z', '2026-04-07T03:30Z'],
    last: ['2026-04-05T03:30Z', '2026-04-06T03:30Z', '2026-04-07T03:30Z'],
  },
  {
    zone: 'America/Havana',
    expression: '30 0 * * *',
    after: '2026-10-31T12:00Z',
    why: '01:00 (-04) falls back to midnight (-05) on 1 November: 00:30 twice',
    both: ['2026-11-01T04:30Z', '2026-11-01T05:30Z', '2026-11-02T05:30Z'],
    first: ['2026-11-01T04:30Z', '2026-11-02T05:30Z', '2026-11-03T05:30Z'],
    last: ['2026-11-01T05:30Z', '2026-11-02T05:30Z', '2026-11-03T05:30Z'],
  },
  {
    zone: 'Pacific/Chatham',
    expression: '0 3 * * *',
    after: '2026-04-04T00:00Z',
    why: '03:45 (+13:45) falls back to 02:45 (+12:45) on 5 April',
    both: ['2026-04-04T13:15Z', '2026-04-04T14:15Z', '2026-04-05T14:15Z'],
    first: ['2026-04-04T13:15Z', '2026-04-05T14:15Z', '2026-04-06T14:15Z'],
    last: ['2026-04-04T14:15Z', '2026-04-05T14:15Z', '2026-04-06T14:15Z'],
  },
];

describe('DST worked examples (every policy)', () => {
  for (const c of GAPS) {
    for (const policy of POLICIES) {
      it(`${c.zone} ${c.expression} ${policyName(policy)}: ${c.why}`, () => {
        expect(nextThree(c.expression, c.zone, c.after, policy)).toEqual(c[policy.gap]);
      });
    }
  }
  for (const c of OVERLAPS) {
    for (const policy of POLICIES) {
      it(`${c.zone} ${c.expression} ${policyName(policy)}: ${c.why}`, () => {
        expect(nextThree(c.expression, c.zone, c.after, policy)).toEqual(c[policy.overlap]);
      });
    }
  }
});

/**
 * Every transition of each zone in the given years, against the brute-force reference, for expressions
 * aimed at the hours the transition removes or repeats and a few that are not, under every policy; then
 * the same occurrences walked backwards with prev().
 */
const CORPUS: Array<{ zone: string; from: string; to: string }> = [
  { zone: 'America/New_York', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Europe/London', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Europe/Berlin', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Australia/Lord_Howe', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'America/Santiago', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'America/Havana', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'America/Asuncion', from: '2023-01-01', to: '2025-01-01' },
  { zone: 'Asia/Beirut', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Pacific/Chatham', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'America/St_Johns', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Africa/Casablanca', from: '2026-01-01', to: '2027-01-01' },
  { zone: 'Asia/Tehran', from: '2021-01-01', to: '2022-01-01' },
  { zone: 'Pacific/Apia', from: '2011-12-01', to: '2012-01-01' },
  { zone: 'Asia/Kolkata', from: '1942-01-01', to: '1946-01-01' },
];

const HOUR = 3_600_000;
const MARGIN = 26 * HOUR;

function expressionsFor(hours: number[]): string[] {
  const aimed = hours.flatMap((h) => [`0 ${h} * * *`, `30 ${h} * * *`, `15,45 ${h} * * *`, `* ${h} * * *`]);
  return [
    ...new Set([...aimed, '*/30 * * * *', '0 * * * *', '0 0 * * *', '45 23 * * *', '5 0 * * *', '0 0 L * *']),
  ];
}

describe('DST corpus against a brute-force reference', () => {
  for (const entry of CORPUS) {
    const transitions = luxonTransitions(entry.zone, Date.parse(entry.from), Date.parse(entry.to));
    it(`${entry.zone} ${entry.from}..${entry.to}: ${transitions.length} transitions, every policy, next and prev`, () => {
      expect(transitions.length).toBeGreaterThan(0);
      let checked = 0;
      for (const t of transitions) {
        const scan = scanWindow(entry.zone, t - MARGIN, t + MARGIN);
        // Compare strictly inside the scanned window, so the reference sees every twin of a repeated time.
        const from = t - MARGIN + 2 * HOUR;
        const to = t + MARGIN - 2 * HOUR;
        const before = wallClock(new Date(t - 60_000), entry.zone);
        const after = wallClock(new Date(t), entry.zone);
        // The hour before the transition, the one after, and the first hour a gap swallows.
        const hours = [...new Set([before.hour, after.hour, (before.hour + 1) % 24])];
        for (const expression of expressionsFor(hours)) {
          const expectedUnder = reference(scan, parseCronFields(expression));
          for (const policy of POLICIES) {
            const expected = expectedUnder(policy).filter((x) => x >= from && x < to);
            const spec = parseCron(expression, entry.zone, { dst: policy });
            const label = `${expression} ${policyName(policy)} around ${new Date(t).toISOString()}`;
            const forward = [...spec.occurrences(new Date(from), new Date(to))].map((d) => d.getTime());
            expect(iso(forward), label).toEqual(iso(expected));
            const backward: number[] = [];
            for (
              let at = spec.prev(new Date(to));
              at !== undefined && at.getTime() >= from;
              at = spec.prev(at)
            )
              backward.push(at.getTime());
            expect(iso(backward.reverse()), `${label} (prev)`).toEqual(iso(expected));
            checked++;
          }
        }
      }
      expect(checked).toBeGreaterThan(0);
    });
  }
});
