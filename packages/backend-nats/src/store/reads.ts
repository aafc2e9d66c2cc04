import type { DeadLetterListQuery, DeadLetterRecord, ListQuery, Schedule } from '@duetime/core';
import type { NatsIo } from '../io.js';
import type { Layout } from '../layout.js';
import { isRecurring, toDeadLetter, toSchedule } from './records.js';

/**
 * Listings that read every record under a prefix (in stream order) and keep the first `limit` in the
 * query's order: a scan, as there is no index by deadline or key. Tools list; deliveries take the fires
 * of the schedules' timers.
 */

interface ReadContext {
  io: NatsIo;
  layout: Layout;
  versionBase: number;
}

export function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function compareDue(a: Schedule, b: Schedule): number {
  return a.dueAt.getTime() - b.dueAt.getTime() || compareKeys(a.key, b.key);
}

/** Active schedules matching `query`, in its order. */
export async function listSchedules(c: ReadContext, query: ListQuery): Promise<Schedule[]> {
  const { layout, io } = c;
  const prefix = query.prefix ?? '';
  const instant = (s: Schedule) =>
    query.order === 'due' ? s.dueAt.getTime() : query.order === 'at' ? s.at.getTime() : 0;
  const compare = (a: Schedule, b: Schedule) => instant(a) - instant(b) || compareKeys(a.key, b.key);
  const through = query.through?.getTime();
  const after = query.after && { at: query.order === 'key' ? 0 : query.after.at, key: query.after.key };
  const page = new SortedPage<Schedule>(query.limit, compare);
  for await (const m of io.scan(layout.storeStream, layout.recordFilter(prefix))) {
    const key = layout.keyOfRecord(m.subject);
    if (!key.startsWith(prefix)) continue;
    const s = toSchedule(key, m, c.versionBase);
    if (!s) continue;
    const at = instant(s);
    if (through !== undefined && at > through) continue;
    if (after && (at < after.at || (at === after.at && key <= after.key))) continue;
    if (query.recurring !== undefined && isRecurring(s) !== query.recurring) continue;
    page.add(s);
  }
  return page.items();
}

/** Dead letters matching `query`, by key. */
export async function listDeadLetters(
  c: ReadContext,
  query: DeadLetterListQuery,
): Promise<DeadLetterRecord[]> {
  const { layout, io } = c;
  const prefix = query.prefix ?? '';
  const page = new SortedPage<DeadLetterRecord>(query.limit, (a, b) => compareKeys(a.key, b.key));
  for await (const m of io.scan(layout.storeStream, layout.deadLetterFilter(prefix))) {
    const key = layout.keyOfDeadLetter(m.subject);
    if (!key.startsWith(prefix) || (query.after !== undefined && key <= query.after)) continue;
    const d = toDeadLetter(key, m);
    if (d) page.add(d);
  }
  return page.items();
}

/** The first `limit` items by `compare` of what is added, in order. */
class SortedPage<T> {
  readonly #items: T[] = [];
  readonly #limit: number;
  readonly #compare: (a: T, b: T) => number;

  constructor(limit: number, compare: (a: T, b: T) => number) {
    this.#limit = limit;
    this.#compare = compare;
  }

  add(item: T): void {
    const items = this.#items;
    if (items.length >= this.#limit && this.#compare(item, items[items.length - 1] as T) >= 0) return;
    let lo = 0;
    let hi = items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#compare(items[mid] as T, item) <= 0) lo = mid + 1;
      else hi = mid;
    }
    items.splice(lo, 0, item);
    if (items.length > this.#limit) items.pop();
  }

  items(): T[] {
    return this.#items;
  }
}
