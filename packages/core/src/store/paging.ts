import type { ListQuery, StoreAdapter, Unit } from '../backend/contract.js';
import { InvalidArgumentError } from '../errors.js';
import { positiveInteger, schedulePrefix, validDate } from '../validate.js';
import type { ScheduleCountQuery, ScheduleQuery } from './types.js';

/** The store's read side: page and count limits, schedule query filters, and counting page by page. */

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
