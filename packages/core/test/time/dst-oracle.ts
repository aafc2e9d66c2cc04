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
}

export function scanWindow(zone: string, from: number, to: number): WindowScan {
  const luxonZone = IANAZone.create(zone);
  const offsets: number[] = [];
  for (let t = from; t < to; t += MINUTE) offsets.push(Math.round(luxonZone.offset(t) * 60) * 1000);
  return { zone, from, offsets };
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

/** Every occurrence inside the scanned window under `policy`, ascending. */
export function referenceOccurrences(scan: WindowScan, fields: CronFields, policy: DstPolicy): number[] {
  const n = scan.offsets.length;
  const at = (i: number) => scan.from + i * MINUTE;
  const local = (i: number) => at(i) + (scan.offsets[i] as number);
  const result = new Set<number>();
  // Wall-clock times lived through more than once in the window, by the order they were lived.
  const seenAt = new Map<number, number[]>();
  for (let i = 0; i < n; i++) {
    const list = seenAt.get(local(i)) ?? [];
    list.push(i);
    seenAt.set(local(i), list);
  }
  for (let i = 0; i < n; i++) {
    if (!matchesWallClock(fields, local(i))) continue;
    const lived = seenAt.get(local(i)) as number[];
    if (policy.overlap === 'first' && lived[0] !== i) continue;
    if (policy.overlap === 'last' && lived[lived.length - 1] !== i) continue;
    result.add(at(i));
  }
  if (policy.gap === 'shift') {
    for (let i = 1; i < n; i++) {
      const before = scan.offsets[i - 1] as number;
      const after = scan.offsets[i] as number;
      if (after <= before) continue;
      // The wall clock jumped from local(i - 1) + 1 minute to local(i): the minutes between never happen.
      for (let m = local(i - 1) + MINUTE; m < local(i); m += MINUTE) {
        if (matchesWallClock(fields, m)) {
          result.add(at(i));
          break;
        }
      }
    }
  }
  return [...result].sort((a, b) => a - b);
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
