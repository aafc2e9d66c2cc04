import {
  type CursorBackend,
  type DeadLetterRecord,
  InvalidArgumentError,
  type LeaseBackend,
  type Schedule,
  type SchedulePageCursor,
  type Store,
  type StoredRecurrence,
  scheduleKey,
  schedulePrefix,
  upcomingOccurrences,
} from '@duetime/core';
import type { DashboardGroup, DashboardOptions } from './handler.js';
import type { LatenessSample, LatenessSampler } from './sampler.js';

/**
 * What the JSON API answers: every read of the store the dashboard makes lives here (the HTTP rules are in
 * `handler.ts`), so that how the data is loaded can change in one place.
 */

const PAGE_DEFAULT = 50;
const PAGE_MAX = 500;
/** How much of each message's data a page carries (characters), cut by the store's query. */
const DATA_PREVIEW = 4000;

/** An answer other than 200, with the headers it needs (`Allow` on 405, `WWW-Authenticate` on 401). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

/** A schedule as the page shows it. */
export interface ScheduleView {
  key: string;
  version: number;
  at: string;
  dueAt: string;
  attempts: number;
  lastError?: string;
  type: string;
  aggregateId?: string;
  /**
   * The message's data as JSON text: in pages, its first 4,000 characters, cut by the store's query (see
   * `dataCut`); from `api/schedule`, all of it.
   */
  data?: string;
  /** True when `data` is only the start of the data (`api/schedule?key=` answers all of it). */
  dataCut?: boolean;
  /** The trace id of the transaction that scheduled it, when the message carries one. */
  traceId?: string;
  recurrence?: RecurrenceView;
  /** Since when the schedule is paused (its own deliveries wait; its `dueAt` is far ahead). */
  paused?: string;
  /** Deliveries queued beside its own (triggers, backfills, occurrences caught up on resume). */
  queued?: number;
}

export interface RecurrenceView {
  /** `cron <expression> <zone>` or `every <n> ms`. */
  spec: string;
  /** Occurrences run so far. */
  count: number;
  /** The pending occurrence and the ones after it (at most 3 in all). */
  next: string[];
  endAt?: string;
  maxOccurrences?: number;
}

export interface DeadLetterView {
  key: string;
  version: number;
  at: string;
  deadAt: string;
  attempts: number;
  error: string;
  type: string;
  aggregateId?: string;
  /** As {@link ScheduleView.data}: cut in pages, whole from `api/dead-letter`. */
  data?: string;
  /** True when `data` is only the start of the data (`api/dead-letter?key=` answers all of it). */
  dataCut?: boolean;
}

export interface GroupView {
  namespace: string;
  environment: string;
  group: string;
  /** Read from the leadership lease; absent when nobody holds it (or it expired). */
  leader?: { owner: string; epoch: number; remainingMs: number };
  /** Whether the leases backend could be read (false: no leases given, or the read failed). */
  readable: boolean;
  /** Per schedule: the cursor read from the backend, and (from an in-process scheduler) the next occurrence. */
  schedules: { id: string; cursor?: string; next?: string; running?: number }[];
  /** The recent records of an in-process scheduler of this group, newest first (absent otherwise). */
  history?: Record<string, unknown>[];
  /** Finished records by state (in-process schedulers only). */
  counts?: Record<string, number>;
}

export class DashboardApi {
  readonly #store: Store;
  readonly #leases: LeaseBackend | undefined;
  readonly #cursors: CursorBackend | undefined;
  readonly #options: DashboardOptions;
  readonly #countLimit: number;
  readonly #csrf: string;
  readonly #sampler: LatenessSampler;

  constructor(
    store: Store,
    options: DashboardOptions,
    countLimit: number,
    csrf: string,
    sampler: LatenessSampler,
  ) {
    this.#store = store;
    this.#leases = options.backend.leases;
    this.#cursors = options.backend.cursors;
    this.#options = options;
    this.#countLimit = countLimit;
    this.#csrf = csrf;
    this.#sampler = sampler;
  }

  async read(route: string, query: URLSearchParams): Promise<unknown> {
    switch (route) {
      case 'overview':
        return this.#overview();
      case 'schedules':
        return this.#schedules(query);
      case 'schedule':
        return this.#schedule(query);
      case 'dead-letters':
        return this.#deadLetters(query);
      case 'dead-letter':
        return this.#deadLetter(query);
      case 'recurring':
        return this.#recurring(query);
      case 'groups':
        return { groups: await this.#groups() };
      case 'lateness':
        return {
          intervalMs: this.#sampler.intervalMs,
          samples: this.#sampler.samples() satisfies LatenessSample[],
        };
      default:
        throw new HttpError(404, `no API ${JSON.stringify(route)}`);
    }
  }

  async action(name: string, body: Record<string, unknown>): Promise<unknown> {
    const key = scheduleKey(body.key as string, 'key');
    if (name === 'retry-dead-letter') {
      const retried = await this.#store.transact((tx) => tx.retryDeadLetter(key));
      return { key, retried };
    }
    if (name === 'cancel') {
      const cancelled = await this.#store.transact((tx) => tx.cancelSchedule(key));
      return { key, cancelled };
    }
    // The store's operations: a key with no active schedule is a NotFoundError (404).
    if (name === 'pause') {
      const paused = await this.#store.transact((tx) => tx.pauseSchedule(key));
      return { key, paused };
    }
    if (name === 'resume') {
      const result = await this.#store.transact((tx) => tx.resumeSchedule(key));
      return {
        key,
        resumed: result.resumed,
        caughtUp: result.caughtUp.map((d) => d.toISOString()),
        ...(result.missed ? { missed: result.missed.count } : {}),
      };
    }
    if (name === 'trigger') {
      const occurrence = await this.#store.transact((tx) => tx.triggerSchedule(key));
      return { key, occurrence };
    }
    throw new HttpError(404, `no action ${JSON.stringify(name)}`);
  }

  /**
   * Totals without reading any message: counts of heads only (`countSchedules`, `countDeadLetters`), each up
   * to `countLimit`, and the due backlog with its oldest due time (`dueBacklog`).
   */
  async #overview() {
    const now = this.#store.clock.now();
    const limit = this.#countLimit;
    const [pending, backlog, dead] = await Promise.all([
      this.#store.countSchedules({ limit }),
      this.#store.dueBacklog({ limit }),
      this.#store.countDeadLetters({ limit }),
    ]);
    const { count: due, oldest } = backlog;
    const count = (n: number) => ({ count: n, more: n >= limit });
    return {
      now: new Date(now).toISOString(),
      backend: this.#options.backend.name ?? 'custom',
      label: this.#options.label ?? this.#options.backend.name ?? 'duetime',
      actions: this.#options.allowActions === true,
      csrf: this.#csrf,
      countLimit: limit,
      pending: count(pending),
      due: count(due),
      deadLetters: count(dead),
      oldestDue: oldest?.toISOString(),
      dispatchers: (this.#options.dispatchers ?? []).map((d) => d.snapshot()),
    };
  }

  async #schedules(query: URLSearchParams) {
    const limit = pageSize(query.get('limit'));
    const prefix = optionalPrefix(query.get('prefix'));
    const after = query.get('after') ? decodeCursor(query.get('after') as string) : undefined;
    const through = query.get('due') === '1' ? new Date(this.#store.clock.now()) : undefined;
    const page = await this.#store.pageSchedules({
      limit,
      preview: DATA_PREVIEW,
      ...(prefix ? { prefix } : {}),
      ...(after ? { after } : {}),
      ...(through ? { through } : {}),
    });
    return {
      items: page.items.map(scheduleView),
      ...(page.next ? { next: encodeCursor(page.next) } : {}),
    };
  }

  async #deadLetters(query: URLSearchParams) {
    const limit = pageSize(query.get('limit'));
    const prefix = optionalPrefix(query.get('prefix'));
    const after = query.get('after') ? scheduleKey(query.get('after') as string, 'after') : undefined;
    const page = await this.#store.pageDeadLetters({
      limit,
      preview: DATA_PREVIEW,
      ...(prefix ? { prefix } : {}),
      ...(after ? { after } : {}),
    });
    return { items: page.items.map(deadLetterView), ...(page.next ? { next: page.next } : {}) };
  }

  /** One schedule with its whole data (what a page cut), by `key`; 404 when none is active under it. */
  async #schedule(query: URLSearchParams) {
    const key = requiredKey(query);
    const schedule = await this.#store.loadSchedule(key);
    if (!schedule) throw new HttpError(404, 'no pending schedule under this key');
    return { item: scheduleView(schedule) };
  }

  /** One dead letter with its whole data, by `key`; 404 when none is kept under it. */
  async #deadLetter(query: URLSearchParams) {
    const key = requiredKey(query);
    const dead = await this.#store.loadDeadLetter(key);
    if (!dead) throw new HttpError(404, 'no dead letter under this key');
    return { item: deadLetterView(dead) };
  }

  /**
   * Recurring schedules, up to `countLimit` of them: the store filters them (`recurring: true`), so one-shot
   * schedules, however many, are neither read nor counted.
   */
  async #recurring(query: URLSearchParams) {
    const prefix = optionalPrefix(query.get('prefix'));
    const items: ScheduleView[] = [];
    let after: SchedulePageCursor | undefined;
    while (items.length < this.#countLimit) {
      const page = await this.#store.pageSchedules({
        recurring: true,
        preview: DATA_PREVIEW,
        limit: Math.min(PAGE_MAX, this.#countLimit - items.length),
        ...(prefix ? { prefix } : {}),
        ...(after ? { after } : {}),
      });
      for (const s of page.items) items.push(scheduleView(s));
      if (!page.next) return { items, scanned: items.length, complete: true };
      after = page.next;
    }
    return { items, scanned: items.length, complete: false };
  }

  async #groups(): Promise<GroupView[]> {
    const schedulers = this.#options.schedulers ?? [];
    const snapshots = schedulers.map((s) => s.snapshot());
    const groups: DashboardGroup[] =
      this.#options.groups ??
      (snapshots.length > 0
        ? snapshots.map((s) => ({ namespace: s.namespace, environment: s.environment, group: s.group }))
        : [{ group: 'default' }]);
    const seen = new Set<string>();
    const views: GroupView[] = [];
    for (const g of groups) {
      const namespace = g.namespace ?? 'duetime';
      const environment = g.environment ?? 'production';
      const prefix = `${namespace}/calendar/${environment}/${g.group}/`;
      if (seen.has(prefix)) continue;
      seen.add(prefix);
      const local = snapshots.filter(
        (s) => s.namespace === namespace && s.environment === environment && s.group === g.group,
      );
      let readable = this.#leases !== undefined;
      let leader: GroupView['leader'];
      if (this.#leases) {
        try {
          const holder = await this.#leases.holder(`${prefix}leader`);
          if (holder) leader = { owner: holder.owner, epoch: holder.token, remainingMs: holder.remainingMs };
        } catch {
          readable = false;
        }
      }
      const ids = new Set([...(g.schedules ?? []), ...local.flatMap((s) => s.schedules.map((x) => x.id))]);
      const schedules: GroupView['schedules'] = [];
      for (const id of ids) {
        const mine = local.map((s) => s.schedules.find((x) => x.id === id)).find((x) => x !== undefined);
        let cursor: Date | undefined;
        if (this.#cursors) cursor = await this.#cursors.read(`${prefix}cursor/${id}`).catch(() => undefined);
        cursor ??= mine?.cursor;
        schedules.push({
          id,
          ...(cursor ? { cursor: cursor.toISOString() } : {}),
          ...(mine?.next ? { next: mine.next.toISOString() } : {}),
          ...(mine ? { running: mine.running } : {}),
        });
      }
      const view: GroupView = {
        namespace,
        environment,
        group: g.group,
        readable,
        schedules,
        ...(leader ? { leader } : {}),
      };
      if (local.length > 0) {
        view.history = local
          .flatMap((s) => s.history)
          .sort(
            (a, b) =>
              (b.finishedAt ?? b.startedAt ?? b.intendedAt).getTime() -
              (a.finishedAt ?? a.startedAt ?? a.intendedAt).getTime(),
          )
          .slice(0, 50)
          .map((r) => JSON.parse(JSON.stringify(r)) as Record<string, unknown>);
        const counts: Record<string, number> = {};
        for (const s of local)
          for (const [k, v] of Object.entries(s.counts)) counts[k] = (counts[k] ?? 0) + v;
        view.counts = counts;
      }
      views.push(view);
    }
    return views;
  }
}

function pageSize(text: string | null): number {
  if (text === null) return PAGE_DEFAULT;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > PAGE_MAX)
    throw new InvalidArgumentError('limit', text, `must be an integer from 1 to ${PAGE_MAX}`);
  return n;
}

function optionalPrefix(text: string | null): string | undefined {
  return text === null || text === '' ? undefined : schedulePrefix(text);
}

function encodeCursor(cursor: SchedulePageCursor): string {
  return Buffer.from(JSON.stringify([cursor.at, cursor.key])).toString('base64url');
}

function decodeCursor(text: string): SchedulePageCursor {
  try {
    const [at, key] = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as [unknown, unknown];
    if (typeof at === 'number' && Number.isFinite(at) && typeof key === 'string') return { at, key };
  } catch {
    // Reported below.
  }
  throw new InvalidArgumentError('after', text, 'is not a page cursor this dashboard gave');
}

/** The key a single-value read names (`?key=`), checked as the store checks keys. */
function requiredKey(query: URLSearchParams): string {
  const key = query.get('key');
  if (key === null) throw new InvalidArgumentError('key', key, 'is required (?key=)');
  return scheduleKey(key, 'key');
}

/**
 * The data as the page shows it: the store's preview in pages (cut by the store's query), or the whole
 * JSON text of a single value.
 */
function dataFields(item: Schedule | DeadLetterRecord): { data?: string; dataCut?: true } {
  if (item.dataPreview)
    return { data: item.dataPreview.text, ...(item.dataPreview.cut ? { dataCut: true as const } : {}) };
  return item.message.data === undefined ? {} : { data: JSON.stringify(item.message.data) };
}

function traceId(trace: Readonly<Record<string, string>> | undefined): string | undefined {
  const parent = trace?.traceparent;
  const match = parent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(parent) : null;
  return match?.[1];
}

function scheduleView(s: Schedule): ScheduleView {
  const trace = traceId(s.message.trace);
  return {
    key: s.key,
    version: s.version,
    at: s.at.toISOString(),
    dueAt: s.dueAt.toISOString(),
    attempts: s.attempts,
    ...(s.lastError !== undefined ? { lastError: s.lastError } : {}),
    type: s.message.type,
    ...(s.message.aggregateId !== undefined ? { aggregateId: s.message.aggregateId } : {}),
    ...dataFields(s),
    ...(trace ? { traceId: trace } : {}),
    ...(s.recurrence ? { recurrence: recurrenceView(s.recurrence, s.at) } : {}),
    ...(s.paused ? { paused: s.paused.at.toISOString() } : {}),
    ...(s.queue?.length ? { queued: s.queue.length } : {}),
  };
}

function recurrenceView(r: StoredRecurrence, at: Date): RecurrenceView {
  return {
    spec:
      r.spec.kind === 'cron' ? `cron ${r.spec.expression} ${r.spec.timeZone}` : `every ${r.spec.everyMs} ms`,
    count: r.count,
    next: upcomingOccurrences(r, at, 3).map((d) => d.toISOString()),
    ...(r.endAt !== undefined ? { endAt: new Date(r.endAt).toISOString() } : {}),
    ...(r.maxOccurrences !== undefined ? { maxOccurrences: r.maxOccurrences } : {}),
  };
}

function deadLetterView(d: DeadLetterRecord): DeadLetterView {
  return {
    key: d.key,
    version: d.version,
    at: d.at.toISOString(),
    deadAt: d.deadAt.toISOString(),
    attempts: d.attempts,
    error: d.error,
    type: d.message.type,
    ...(d.message.aggregateId !== undefined ? { aggregateId: d.message.aggregateId } : {}),
    ...dataFields(d),
  };
}
