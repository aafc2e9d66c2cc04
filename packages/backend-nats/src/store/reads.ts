import type { DeadLetterListQuery, DeadLetterRecord, DueBacklog, ListQuery, Schedule } from '@duetime/core';
import type { NatsIo, StoredMessage } from '../io.js';
import { H } from '../jetstream-scheduler/headers.js';
import type { Layout } from '../layout.js';
import { isRecurring, isTombstone, timerIdOf, toDeadLetter, toSchedule } from './records.js';

/**
 * Listings that read every record under a prefix (in stream order) and keep the first `limit` in the
 * query's order: a scan, as JetStream keeps no index by deadline or key. Counts read in one pass and stop
 * at their limit. Tools list and count; deliveries take the fires of the schedules' timers.
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
  const instant = instantOf(query);
  const compare = (a: Schedule, b: Schedule) => instant(a) - instant(b) || compareKeys(a.key, b.key);
  const page = new SortedPage<Schedule>(query.limit, compare);
  const match = matcher(c, query);
  for await (const m of c.io.sweep(c.layout.storeStream, c.layout.recordFilter(query.prefix ?? ''))) {
    const s = match(m);
    if (s) page.add(s);
  }
  return page.items();
}

/**
 * How many active schedules match `query`, up to `query.limit`: one pass over the records that stops at
 * the limit (listing heads a page at a time would read the records again for every page).
 */
export async function countSchedules(
  c: ReadContext,
  query: Omit<ListQuery, 'after' | 'select' | 'preview'>,
): Promise<number> {
  return countUpTo(c, c.layout.recordFilter(query.prefix ?? ''), query.limit, matcher(c, query));
}

/**
 * The due backlog, from the timers: the fires above the fires consumer's acknowledgement floor (below it,
 * every fire was acknowledged: consumed, dropped as stale or given back as a new fire), each checked
 * against its key's record (still that record's timer: not replaced, retried, cancelled or consumed) and
 * due by `now` (a timer fires a little ahead of its due time), counted up to `limit`. Reads the fired
 * timers and their records only, however many schedules wait for later. A record whose timer has not fired
 * yet is not counted: what the dispatchers can claim is what fired.
 */
export async function dueBacklog(
  c: ReadContext,
  floor: number,
  query: { now: Date; limit: number },
): Promise<DueBacklog> {
  const { io, layout } = c;
  const now = query.now.getTime();
  const counted = new Set<string>();
  let oldest = Number.POSITIVE_INFINITY;
  let from = floor + 1;
  for (;;) {
    const { messages, pending } = await io.range(layout.storeStream, layout.fires, from, FIRES_PAGE);
    // Per key, the timers that fired (a key may have fired more than once: a stale timer, a fire given back).
    const fired = new Map<string, Map<string, number>>();
    for (const m of messages) {
      const key = layout.keyOfFire(m.subject);
      const id = m.header(H.timer);
      const due = Number(m.header(H.due));
      if (id === undefined || !Number.isFinite(due) || due > now || counted.has(key)) continue;
      fired.set(key, (fired.get(key) ?? new Map()).set(id, due));
    }
    const records = await io.lastOf(
      layout.storeStream,
      [...fired.keys()].map((key) => layout.record(key)),
    );
    for (const [key, timers] of fired) {
      const record = records.get(layout.record(key));
      const due = record && !isTombstone(record) ? timers.get(timerIdOf(record) ?? '') : undefined;
      if (due === undefined) continue;
      counted.add(key);
      oldest = Math.min(oldest, due);
      if (counted.size >= query.limit) break;
    }
    const last = messages.at(-1);
    if (counted.size >= query.limit || !last || pending === 0 || messages.length < FIRES_PAGE) break;
    from = last.seq + 1;
  }
  return counted.size > 0 ? { count: counted.size, oldest: new Date(oldest) } : { count: 0 };
}

/** How many fires one read of the due backlog takes. */
const FIRES_PAGE = 1000;

/** The instant a query orders by: `dueAt` for `due`, `at` for `at`, none for `key`. */
function instantOf(query: Pick<ListQuery, 'order'>): (s: Schedule) => number {
  return (s) => (query.order === 'due' ? s.dueAt.getTime() : query.order === 'at' ? s.at.getTime() : 0);
}

/** The schedule of a record message when it is active and matches the query's filters, else undefined. */
function matcher(
  c: ReadContext,
  query: Pick<ListQuery, 'order' | 'prefix' | 'through' | 'after' | 'recurring'>,
): (m: StoredMessage) => Schedule | undefined {
  const prefix = query.prefix ?? '';
  const instant = instantOf(query);
  const through = query.through?.getTime();
  const after = query.after && { at: query.order === 'key' ? 0 : query.after.at, key: query.after.key };
  return (m) => {
    const key = c.layout.keyOfRecord(m.subject);
    if (!key.startsWith(prefix)) return undefined;
    const s = toSchedule(key, m, c.versionBase);
    if (!s) return undefined;
    const at = instant(s);
    if (through !== undefined && at > through) return undefined;
    if (after && (at < after.at || (at === after.at && key <= after.key))) return undefined;
    if (query.recurring !== undefined && isRecurring(s) !== query.recurring) return undefined;
    return s;
  };
}

/** Dead letters matching `query`, by key. */
export async function listDeadLetters(
  c: ReadContext,
  query: DeadLetterListQuery,
): Promise<DeadLetterRecord[]> {
  const { layout, io } = c;
  const prefix = query.prefix ?? '';
  const page = new SortedPage<DeadLetterRecord>(query.limit, (a, b) => compareKeys(a.key, b.key));
  for await (const m of io.sweep(layout.storeStream, layout.deadLetterFilter(prefix))) {
    const key = layout.keyOfDeadLetter(m.subject);
    if (!key.startsWith(prefix) || (query.after !== undefined && key <= query.after)) continue;
    const d = toDeadLetter(key, m);
    if (d) page.add(d);
  }
  return page.items();
}

/** How many dead letters there are under `query.prefix`, up to `query.limit`: one pass, stopping there. */
export async function countDeadLetters(
  c: ReadContext,
  query: { prefix?: string; limit: number },
): Promise<number> {
  const prefix = query.prefix ?? '';
  return countUpTo(
    c,
    c.layout.deadLetterFilter(prefix),
    query.limit,
    (m) => !isTombstone(m) && c.layout.keyOfDeadLetter(m.subject).startsWith(prefix),
  );
}

/** How many messages matching `filter` `counts`, up to `limit`: one pass, stopping there. */
async function countUpTo(
  c: ReadContext,
  filter: string,
  limit: number,
  counts: (m: StoredMessage) => unknown,
): Promise<number> {
  let count = 0;
  if (limit <= 0) return 0;
  for await (const m of c.io.sweep(c.layout.storeStream, filter)) if (counts(m) && ++count >= limit) break;
  return count;
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
