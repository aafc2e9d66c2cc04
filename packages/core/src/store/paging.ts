import type { ListQuery, StoreAdapter, Unit } from '../backend/contract.js';
import { CorruptDataError, InvalidArgumentError } from '../errors.js';
import { MAX_MESSAGE_BYTES, positiveInteger, schedulePrefix, validDate } from '../validate.js';
import type { DataPreview, Message, ScheduleCountQuery, ScheduleQuery } from './types.js';

/**
 * The store's read side: page and count limits, schedule query filters, counting page by page, and data
 * previews (cut in the adapter's query, or here after loading).
 */

const DEFAULT_PAGE = 500;
const MAX_PAGE = 10_000;
const DEFAULT_COUNT = 10_000;
const MAX_COUNT = 100_000;

/** Checks a page query's `limit` (default 500, at most 10,000). */
export function pageLimit(given: unknown): number {
  const limit = given === undefined ? DEFAULT_PAGE : positiveInteger('query.limit', given);
  if (limit > MAX_PAGE) throw new InvalidArgumentError('query.limit', limit, `must be at most ${MAX_PAGE}`);
  return limit;
}

/** Checks a count query's `limit` (default 10,000, at most 100,000). */
export function countLimit(given: unknown): number {
  const limit = given === undefined ? DEFAULT_COUNT : positiveInteger('query.limit', given);
  if (limit > MAX_COUNT) throw new InvalidArgumentError('query.limit', limit, `must be at most ${MAX_COUNT}`);
  return limit;
}

/** Checks a page query's `preview` (1 to 262,144 characters; `undefined` when not given). */
export function previewLength(given: unknown): number | undefined {
  if (given === undefined) return undefined;
  const n = positiveInteger('query.preview', given);
  if (n > MAX_MESSAGE_BYTES)
    throw new InvalidArgumentError('query.preview', n, `must be at most ${MAX_MESSAGE_BYTES}`);
  return n;
}

/**
 * The first `n` Unicode code points of `text` (a surrogate pair is never split), as SQL's `left` and
 * `substr` count them.
 */
export function firstCodePoints(text: string, n: number): string {
  if (text.length <= n) return text;
  let units = 0;
  for (let points = 0; points < n && units < text.length; points++) {
    const c = text.charCodeAt(units);
    units += c >= 0xd800 && c <= 0xdbff && units + 1 < text.length ? 2 : 1;
  }
  return text.slice(0, units);
}

/**
 * For SQL adapters answering `preview` in their query: the {@link DataPreview} of a row from the engine's
 * cut JSON text of the data (`null` or `undefined` when the message has none) and its "was cut" flag
 * (a boolean, or 0/1). `where` names the row in errors.
 */
export function decodePreview(text: unknown, cut: unknown, where: string): DataPreview | undefined {
  if (text === null || text === undefined) return undefined;
  if (typeof text !== 'string') throw new CorruptDataError(`${where}: the data preview is not text`);
  return { text, cut: cut === true || cut === 1 || cut === '1' || cut === 't' };
}

/**
 * Core's side of `preview`: an item the adapter returned whole gets its data cut here (and left out of
 * its message); one the adapter already cut keeps its preview, bounded again to `n`.
 */
export function withPreview<T extends { message: Message; dataPreview?: DataPreview }>(
  item: T,
  n: number,
): T {
  const given = item.dataPreview;
  if (given) {
    const text = firstCodePoints(given.text, n);
    if (text !== given.text) item.dataPreview = { text, cut: true };
  } else if (item.message.data !== undefined) {
    const json = JSON.stringify(item.message.data);
    const text = firstCodePoints(json, n);
    item.dataPreview = { text, cut: text !== json };
  }
  if ('data' in item.message) {
    const { data: _data, ...rest } = item.message;
    item.message = rest;
  }
  return item;
}

/** Checks a query's filters; an adapter without a deadline index answers in key order. */
export function scheduleFilters(
  query: ScheduleQuery | ScheduleCountQuery,
  supported: StoreAdapter<unknown, Unit<unknown>>['order'],
): Omit<ListQuery, 'limit'> {
  if (typeof query !== 'object' || query === null)
    throw new InvalidArgumentError('query', query, 'must be an object');
  const order = query.order ?? 'at';
  if (order !== 'at' && order !== 'due')
    throw new InvalidArgumentError('query.order', order, 'must be "at" or "due"');
  const effective = supported === undefined || supported.includes(order) ? order : 'key';
  const through = query.through === undefined ? undefined : validDate('through', query.through);
  const prefix = query.prefix === undefined ? undefined : schedulePrefix(query.prefix);
  if (query.recurring !== undefined && typeof query.recurring !== 'boolean')
    throw new InvalidArgumentError('query.recurring', query.recurring, 'must be true or false');
  return {
    order: effective,
    ...(through ? { through } : {}),
    ...(prefix !== undefined ? { prefix } : {}),
    ...(query.recurring !== undefined ? { recurring: query.recurring } : {}),
  };
}

/**
 * Counts dead letters under `prefix`, up to `limit`: by the adapter's own count when it has one, else a
 * page at a time (payloads included).
 */
export async function countDeadLetters<Sql>(
  adapter: StoreAdapter<Sql, Unit<Sql>>,
  prefix: string | undefined,
  limit: number,
): Promise<number> {
  if (adapter.countDeadLetters)
    return Math.min(
      limit,
      await adapter.countDeadLetters({ limit, ...(prefix !== undefined ? { prefix } : {}) }),
    );
  return countDeadLetterPages(adapter, prefix, limit);
}

/** Counts dead letters under `prefix`, up to `limit`, a page at a time. */
export async function countDeadLetterPages<Sql>(
  adapter: StoreAdapter<Sql, Unit<Sql>>,
  prefix: string | undefined,
  limit: number,
): Promise<number> {
  let count = 0;
  let after: string | undefined;
  while (count < limit) {
    const size = Math.min(MAX_PAGE, limit - count);
    const page = await adapter.listDeadLetters({
      limit: size,
      ...(prefix !== undefined ? { prefix } : {}),
      ...(after !== undefined ? { after } : {}),
    });
    count += page.length;
    if (page.length < size) break;
    after = page.at(-1)!.key;
  }
  return count;
}

/** Counts schedule heads matching `filters`, up to `limit`, a page at a time. */
export async function countSchedulePages<Sql>(
  adapter: StoreAdapter<Sql, Unit<Sql>>,
  filters: Omit<ListQuery, 'limit'>,
  limit: number,
): Promise<number> {
  let count = 0;
  let after: ListQuery['after'];
  while (count < limit) {
    const size = Math.min(MAX_PAGE, limit - count);
    const page = await adapter.listSchedules({
      ...filters,
      select: 'heads',
      limit: size,
      ...(after ? { after } : {}),
    });
    count += page.length;
    const last = page.at(-1);
    if (page.length < size || !last) break;
    const position = filters.order === 'due' ? last.dueAt : filters.order === 'key' ? new Date(0) : last.at;
    after = { at: position.getTime(), key: last.key };
  }
  return count;
}
