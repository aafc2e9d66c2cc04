import { CronExpressionParser } from 'cron-parser';
import { Cron } from 'croner';
import { type DstPolicy, parseCronFields } from '../../src/index.js';
import { type OffsetSegment, zoneOffsets } from '../../src/time/zone.js';

/**
 * The outside oracles of the differential tests, and every known way they differ from duetime. A case
 * that one of these divergences covers is not compared with that library; nothing else is excluded.
 */

/** A generated expression with its fields as written (5 fields, or 6 with seconds first). */
export interface CronCase {
  expression: string;
  zone: string;
  start: Date;
  /** The other end of the compared occurrences (duetime's last one), to see whether a transition lies between. */
  spanEnd: number;
}

export interface Divergence {
  id: string;
  library: 'croner' | 'cron-parser';
  /** What differs, and which side is the documented duetime behaviour. */
  description: string;
  applies(c: CronCase): boolean;
}

export function fieldsOf(expression: string): { dom: string; dow: string; month: string; hms: string[] } {
  const parts = expression.trim().split(/\s+/);
  const six = parts.length === 6 ? parts : ['0', ...parts];
  return { hms: six.slice(0, 3), dom: six[3] as string, month: six[4] as string, dow: six[5] as string };
}

const FULL = new Set(['*', '?']);

/** Whether a UTC-offset transition of the case's zone falls inside `[from, to]`. */
export function crossesTransition(zone: string, from: number, to: number): boolean {
  const offsets = zoneOffsets(zone);
  const seg: OffsetSegment = { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 };
  offsets.segmentAt(from, seg);
  for (;;) {
    if (seg.end > to) return false;
    if (seg.offsetAfter !== seg.offset) return true;
    offsets.segmentAt(seg.end, seg);
  }
}

/** The UTC-offset transitions of `zone` in `[from, to)`, as instants. */
export function transitionsBetween(zone: string, from: number, to: number): number[] {
  const offsets = zoneOffsets(zone);
  const seg: OffsetSegment = { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 };
  const out: number[] = [];
  offsets.segmentAt(from, seg);
  while (seg.end < to) {
    if (seg.offsetAfter !== seg.offset) out.push(seg.end);
    offsets.segmentAt(seg.end, seg);
  }
  return out;
}

export const DIVERGENCES: Divergence[] = [
  {
    id: 'day-rule-star-prefix',
    library: 'cron-parser',
    description:
      'day-of-month and day-of-week both restricted, one of them written with a leading "*" (such as "*/2"): ' +
      'duetime (like Vixie cron) counts a "*"-prefixed field as unrestricted and combines with AND; ' +
      'cron-parser combines with OR. (croner is compared with its domAndDow option set to match.)',
    applies: (c) => {
      const { dom, dow } = fieldsOf(c.expression);
      const star = (t: string) => t.startsWith('*') || t.startsWith('?');
      return (star(dom) || star(dow)) && !FULL.has(dom) && !FULL.has(dow);
    },
  },
  {
    id: 'dst-transition',
    library: 'cron-parser',
    description:
      'cron-parser moves times in a DST gap forward by the length of the gap (02:30 becomes 03:30, not the ' +
      'first instant after the gap) and fires some repeated times once; no duetime policy reproduces it, so ' +
      'cases whose occurrences span a UTC-offset transition of their zone are not compared with it.',
    applies: (c) =>
      crossesTransition(
        c.zone,
        Math.min(c.start.getTime(), c.spanEnd) - 86_400_000,
        Math.max(c.start.getTime(), c.spanEnd) + 86_400_000,
      ),
  },
  {
    id: 'croner-open-step-weekday',
    library: 'croner',
    description:
      'an open step "a/n" in day-of-week: duetime and cron-parser run it up to 7 (Sunday again, as Vixie ' +
      'cron does), croner stops at 6, so "1/2" is Mon, Wed, Fri, Sun for duetime and Mon, Wed, Fri for croner.',
    applies: (c) =>
      fieldsOf(c.expression)
        .dow.split(',')
        .some((item) => {
          const m = /^(\d)\/(\d+)$/.exec(item);
          return m !== null && (7 - Number(m[1])) % Number(m[2]) === 0;
        }),
  },
  {
    id: 'sunday-to-sunday',
    library: 'croner',
    description:
      'the day-of-week range "SUN-SUN": croner reads the whole week (SUN at a range end as 7), duetime and ' +
      'cron-parser read Sunday only (SUN is 7 at a range end only after a later weekday, as in "FRI-SUN").',
    applies: (c) => /(^|,)SUN-SUN(\/|,|$)/i.test(fieldsOf(c.expression).dow),
  },
  {
    id: 'duplicate-list-values',
    library: 'cron-parser',
    description:
      'a list whose items overlap ("1-9,1"): duetime takes the union, cron-parser rejects the expression ' +
      '("duplicate values found").',
    applies: (c) => hasOverlappingItems(c.expression),
  },
  {
    id: 'sunday-as-range-end',
    library: 'cron-parser',
    description:
      'a day-of-week range ending in the name SUN ("FRI-SUN"): duetime reads SUN as 7, cron-parser rejects it.',
    applies: (c) => /-SUN\b/i.test(fieldsOf(c.expression).dow),
  },
];

const FIELD_POSITIONS = 6;

/** Whether two items of one list field allow a common value (each item expanded by duetime's parser). */
function hasOverlappingItems(expression: string): boolean {
  const parts = expression.trim().split(/\s+/);
  const six = parts.length === 6 ? parts : ['0', ...parts];
  for (let position = 0; position < FIELD_POSITIONS; position++) {
    const items = (six[position] as string).split(',');
    if (items.length < 2) continue;
    const seen = new Set<string>();
    for (const item of items) {
      const probe = six.map((f, i) =>
        i === position ? item : i === 3 || i === 5 ? '*' : f === '?' ? '*' : '*',
      );
      // A lone item in an otherwise open expression: its values are the field's list in describe().
      const fields = parseCronFields(probe.join(' '));
      const values = [
        fields.seconds,
        fields.minutes,
        fields.hours,
        fields.lastDayOfMonth ? [...fields.daysOfMonth, 99] : fields.daysOfMonth,
        fields.months,
        fields.daysOfWeek,
      ][position] as readonly number[];
      for (const v of values) {
        if (seen.has(String(v))) return true;
      }
      for (const v of values) seen.add(String(v));
    }
  }
  return false;
}

export function divergencesFor(library: Divergence['library'], c: CronCase): Divergence[] {
  return DIVERGENCES.filter((d) => d.library === library && d.applies(c));
}

/**
 * croner's DST rules expressed as a duetime policy: a "fixed-time" job (one value in each of seconds,
 * minutes and hours) runs once at the first occurrence of a repeated time and right after a gap; other
 * jobs run at every instant whose wall clock matches.
 */
export function cronerEquivalentPolicy(expression: string): DstPolicy {
  const fixed = fieldsOf(expression).hms.every((f) => /^\d+$/.test(f));
  return fixed ? { gap: 'shift', overlap: 'first' } : { gap: 'skip', overlap: 'both' };
}

export function cronerNext(c: CronCase, count: number, dayRule: 'and' | 'or'): number[] {
  const job = new Cron(c.expression, {
    timezone: c.zone,
    paused: true,
    mode: '5-or-6-parts',
    sloppyRanges: true,
    domAndDow: dayRule === 'and',
  });
  return job.nextRuns(count, c.start).map((d) => d.getTime());
}

export function cronerPrev(c: CronCase, count: number, dayRule: 'and' | 'or'): number[] {
  const job = new Cron(c.expression, {
    timezone: c.zone,
    paused: true,
    mode: '5-or-6-parts',
    sloppyRanges: true,
    domAndDow: dayRule === 'and',
  });
  return job.previousRuns(count, c.start).map((d) => d.getTime());
}

export function cronParserNext(c: CronCase, count: number): number[] {
  const iterator = CronExpressionParser.parse(c.expression, { currentDate: c.start, tz: c.zone });
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(iterator.next().getTime());
  return out;
}

export function cronParserPrev(c: CronCase, count: number): number[] {
  const iterator = CronExpressionParser.parse(c.expression, { currentDate: c.start, tz: c.zone });
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(iterator.prev().getTime());
  return out;
}
