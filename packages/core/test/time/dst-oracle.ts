import { IANAZone } from 'luxon';
import type { CronFields, DstPolicy } from '../../src/index.js';

/**
 * A brute-force reference for cron in a zone, sharing nothing with the engine but the parsed field sets:
 * it reads luxon's offset at every UTC minute of a window, tests each wall-clock minute with a naive
 * matcher, and applies the DST policy from its definition (a wall-clock time seen twice, a gap's
 * swallowed times). Slow and obviously right; valid for 5-field expressions in zones whose offsets are
 * whole minutes (every zone since 1972).
 */

const MINUTE = 60_000;

export interface WindowScan {
  zone: string;
  from: number;
  /** Offset (ms) at each minute `from + i * MINUTE`. */
  offsets: number[];
  /** Wall-clock time (local ms) at each minute. */
  locals: number[];
  /** For each minute: the first and the last minute of the window showing the same wall-clock time. */
  firstTwin: number[];
  lastTwin: number[];
}

export function scanWindow(zone: string, from: number, to: number): WindowScan {
  const luxonZone = IANAZone.create(zone);
  const offsets: number[] = [];
  const locals: number[] = [];
  for (let t = from; t < to; t += MINUTE) {
    const offset = Math.round(luxonZone.offset(t) * 60) * 1000;
    offsets.push(offset);
    locals.push(t + offset);
  }
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  locals.forEach((local, i) => {
    if (!first.has(local)) first.set(local, i);
    last.set(local, i);
  });
  return {
    zone,
    from,
    offsets,
    locals,
    firstTwin: locals.map((l) => first.get(l) as number),
    lastTwin: locals.map((l) => last.get(l) as number),
  };
}

function matchesWallClock(fields: CronFields, localMs: number): boolean {
  const d = new Date(localMs);
  if (d.getUTCSeconds() !== 0 || !fields.seconds.includes(0)) return false;
  if (!fields.minutes.includes(d.getUTCMinutes()) || !fields.hours.includes(d.getUTCHours())) return false;
  if (!fields.months.includes(d.getUTCMonth() + 1)) return false;
  const day = d.getUTCDate();
  const lastDay = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 0)).getUTCDate();
  const dom = fields.daysOfMonth.includes(day) || (fields.lastDayOfMonth && day === lastDay);
  const dow = fields.daysOfWeek.includes(d.getUTCDay());
  return fields.dayRule === 'or' ? dom || dow : dom && dow;
}

/** The reference of one expression in a scanned window: its occurrences under a policy, ascending. */
export function reference(scan: WindowScan, fields: CronFields): (policy: DstPolicy) => number[] {
  const n = scan.locals.length;
  const at = (i: number) => scan.from + i * MINUTE;
  const matching: number[] = [];
  for (let i = 0; i < n; i++) if (matchesWallClock(fields, scan.locals[i] as number)) matching.push(i);
  // Instants where a gap ends, when the gap swallowed a matching wall-clock time.
  const shifted: number[] = [];
  for (let i = 1; i < n; i++) {
    if ((scan.offsets[i] as number) <= (scan.offsets[i - 1] as number)) continue;
    // The wall clock jumped from locals[i - 1] + 1 minute to locals[i]: the minutes between never happen.
    for (let m = (scan.locals[i - 1] as number) + MINUTE; m < (scan.locals[i] as number); m += MINUTE) {
      if (matchesWallClock(fields, m)) {
        shifted.push(i);
        break;
      }
    }
  }
  return (policy) => {
    const result = new Set<number>();
    for (const i of matching) {
      // A wall-clock time lived more than once: `first` keeps its first instant, `last` its last.
      if (policy.overlap === 'first' && scan.firstTwin[i] !== i) continue;
      if (policy.overlap === 'last' && scan.lastTwin[i] !== i) continue;
      result.add(at(i));
    }
    if (policy.gap === 'shift') for (const i of shifted) result.add(at(i));
    return [...result].sort((a, b) => a - b);
  };
}

/** The instants in `[from, to)` where the offset changes, read from luxon hour by hour and then to the minute. */
export function luxonTransitions(zone: string, from: number, to: number): number[] {
  const luxonZone = IANAZone.create(zone);
  const out: number[] = [];
  const HOUR = 3_600_000;
  let previous = luxonZone.offset(from);
  for (let t = from + HOUR; t < to; t += HOUR) {
    const offset = luxonZone.offset(t);
    if (offset !== previous) {
      let m = t - HOUR + MINUTE;
      while (luxonZone.offset(m) === previous) m += MINUTE;
      out.push(m);
      previous = offset;
    }
  }
  return out;
}
