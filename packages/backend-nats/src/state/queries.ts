import { createHash } from 'node:crypto';
import { byKey, byTime, first, type Item, type NodeReader, type Root, scan } from './btree.js';
import { StaleSnapshot } from './snapshot.js';
import type { RecordValue } from './types.js';

/** The state a query runs against: a read snapshot, or a plan's view of its own changes. */
export interface StateView extends NodeReader {
  roots(): { due: Root; at: Root; key: Root };
  record(key: string): Promise<RecordValue | undefined>;
}

export interface ListQuery {
  through?: number;
  prefix?: string;
  after?: { at: number; key: string };
  limit: number;
}

/**
 * Up to this many keys under a prefix are sorted in memory by deadline; a larger prefix is answered by
 * walking the deadline index and filtering, which keeps memory bounded at the cost of time.
 */
const PREFIX_SORT_LIMIT = 10_000;

/**
 * Loads the records of `items`, in order. In a consistent snapshot every indexed key has its record; a
 * missing one was deleted and cleaned up after the snapshot, so the snapshot is stale.
 */
async function records(view: StateView, items: Item[]): Promise<RecordValue[]> {
  const loaded = await Promise.all(items.map((item) => view.record(item[1])));
  return loaded.map((r, i) => {
    if (!r) throw new StaleSnapshot(`schedule ${JSON.stringify((items[i] as Item)[1])}`);
    return r;
  });
}

function afterCursor(item: Item, after: { at: number; key: string } | undefined): boolean {
  return after === undefined || byTime(item, [after.at, after.key]) > 0;
}

/** Active schedules ordered by (at, key), filtered and paged as the driver contract says. */
export async function listSchedules(view: StateView, query: ListQuery): Promise<RecordValue[]> {
  const { through, prefix, after, limit } = query;
  const roots = view.roots();
  if (prefix !== undefined && prefix !== '') {
    const matches: Item[] = [];
    let small = true;
    for await (const item of scan(roots.key, [0, prefix], byKey, view)) {
      if (!item[1].startsWith(prefix)) break;
      if (matches.length >= PREFIX_SORT_LIMIT) {
        small = false;
        break;
      }
      matches.push(item);
    }
    if (small) {
      const page = matches
        .filter((item) => (through === undefined || item[0] <= through) && afterCursor(item, after))
        .sort(byTime)
        .slice(0, limit);
      return records(view, page);
    }
  }
  const page: Item[] = [];
  const from: Item | undefined = after ? [after.at, after.key] : undefined;
  for await (const item of scan(roots.at, from, byTime, view, true)) {
    if (through !== undefined && item[0] > through) break;
    if (prefix !== undefined && !item[1].startsWith(prefix)) continue;
    page.push(item);
    if (page.length >= limit) break;
  }
  return records(view, page);
}

/** Active schedules with dueAt <= now, ordered by (dueAt, key). */
export async function dueSchedules(view: StateView, now: number, limit: number): Promise<RecordValue[]> {
  const page: Item[] = [];
  for await (const item of scan(view.roots().due, undefined, byTime, view)) {
    if (item[0] > now) break;
    page.push(item);
    if (page.length >= limit) break;
  }
  return (await records(view, page)).filter((r) => r.dueAt <= now);
}

/** The earliest dueAt, if any schedule is active. */
export async function nextDueAt(view: StateView): Promise<number | undefined> {
  return (await first(view.roots().due, view))?.[0];
}

/** A short digest of what a listing returned (keys and versions), for validating a transaction's reads. */
export function listingDigest(items: readonly { key: string; version: number }[]): string {
  return createHash('sha256')
    .update(JSON.stringify(items.map((s) => [s.key, s.version])))
    .digest('base64url')
    .slice(0, 22);
}
