import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type Backend,
  ConflictError,
  type CursorBackend,
  type DeadLetterRecord,
  type DeliveryEvent,
  type Dispatcher,
  type DispatcherSnapshot,
  DuetimeError,
  InvalidArgumentError,
  type LeaseBackend,
  type Logger,
  type Schedule,
  type SchedulePageCursor,
  type Scheduler,
  type Store,
  type StoredRecurrence,
  scheduleKey,
  schedulePrefix,
  silentLogger,
  upcomingOccurrences,
} from '@duetime/core';
import { renderPage } from './page.js';
import { type LatenessSample, LatenessSampler } from './sampler.js';
import { randomToken, redactText, sameSecret } from './security.js';

/** A calendar group whose leadership the page shows. */
export interface DashboardGroup {
  /** Default `duetime`. */
  namespace?: string;
  /** Default `production`. */
  environment?: string;
  group: string;
  /** Schedule ids whose cursors to read (the mounted schedulers' own ids are read anyway). */
  schedules?: string[];
}

/** What the dashboard uses of an in-process {@link Dispatcher} (any `Dispatcher<M, Sql>` fits). */
export interface DashboardDispatcher {
  snapshot(): DispatcherSnapshot;
  on(name: 'delivered', listener: (event: DeliveryEvent) => unknown): () => void;
}

/** Options of {@link createDashboard}. */
export interface DashboardOptions {
  /** The backend to read: a duetime `Backend` (its store, leases and cursors), or just a store. */
  backend: Pick<Backend, 'store'> & Partial<Pick<Backend, 'leases' | 'cursors' | 'name'>>;
  /** Shown in the page's title bar, e.g. a redacted backend URL (never put a password here). */
  label?: string;
  /**
   * Calendar groups to show leaders of. Default: the groups of `schedulers`, else the default group
   * (`duetime/production/default`).
   */
  groups?: DashboardGroup[];
  /** Schedulers running in this process: the page adds their history, next occurrences and cursors. */
  schedulers?: Scheduler[];
  /** Dispatchers running in this process: the page adds their counters and the lateness of their deliveries. */
  dispatchers?: DashboardDispatcher[];
  /**
   * Enables the write actions (retry a dead letter, cancel a schedule), each confirmed in the page and
   * sent as a POST with a CSRF token. Default false: the dashboard never writes.
   */
  allowActions?: boolean;
  /**
   * When set, every API request must carry `Authorization: Bearer <token>` (compared in constant time).
   * The page itself holds no data; it asks for the token and keeps it in the tab's session storage.
   */
  token?: string;
  /** Texts never to show or log (e.g. a backend URL's password); the token is always among them. */
  secrets?: string[];
  /** Most schedules counted for the page's totals (default 1,000; larger totals show as "1000+"). */
  countLimit?: number;
  /** How often the lateness chart samples the due backlog, in ms (default 5,000). */
  sampleIntervalMs?: number;
  /** How far back the lateness chart goes, in ms (default 15 minutes). */
  sampleWindowMs?: number;
  /** Where request failures are logged (secrets redacted). Default: the store's logger. */
  logger?: Logger;
}

/**
 * A request handler for node's `http` server, also usable as Express middleware (`app.use('/duetime',
 * dashboard)`) and from Fastify (`reply.hijack(); dashboard(request.raw, reply.raw)`). Paths are taken
 * relative to where it is mounted (Express strips the mount path; elsewhere pass `basePath` to
 * {@link createDashboard}). `close()` stops its lateness sampler.
 */
export interface DashboardHandler {
  (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  close(): void;
}

const PAGE_DEFAULT = 50;
const PAGE_MAX = 500;
const DATA_PREVIEW = 4000;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Builds the dashboard's request handler (see {@link DashboardHandler}). */
export function createDashboard(options: DashboardOptions & { basePath?: string }): DashboardHandler {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', options, 'must be an object { backend, ... }');
  const store = options.backend?.store;
  if (typeof store?.pageSchedules !== 'function')
    throw new InvalidArgumentError(
      'options.backend',
      options.backend,
      'must be a duetime Backend (or { store })',
    );
  if (options.token !== undefined && (typeof options.token !== 'string' || options.token.length < 16))
    throw new InvalidArgumentError('options.token', '[hidden]', 'must be a string of at least 16 characters');
  const countLimit = options.countLimit ?? 1000;
  if (!Number.isInteger(countLimit) || countLimit < 1)
    throw new InvalidArgumentError('options.countLimit', countLimit, 'must be a positive integer');
  const basePath = (options.basePath ?? '').replace(/\/+$/, '');
  const secrets = [...(options.secrets ?? []), ...(options.token ? [options.token] : [])];
  const logger = options.logger ?? store.logger ?? silentLogger;
  const csrf = randomToken();
  const sampler = new LatenessSampler(store, {
    intervalMs: options.sampleIntervalMs ?? 5000,
    windowMs: options.sampleWindowMs ?? 15 * 60_000,
    countLimit,
    dispatchers: options.dispatchers ?? [],
    logger,
  });
  const api = new DashboardApi(store, options, countLimit, csrf, sampler);

  const handler = ((req: IncomingMessage, res: ServerResponse) => {
    void serve(req, res).catch((error: unknown) => {
      logger.warn('dashboard request failed', { error: redactText(String(error), secrets) });
      if (!res.headersSent) send(res, 500, { error: 'internal error' });
      else res.end();
    });
  }) as DashboardHandler;
  handler.close = () => sampler.stop();

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    let path = url.pathname;
    if (basePath && (path === basePath || path.startsWith(`${basePath}/`)))
      path = path.slice(basePath.length);
    if (path === '') path = '/';
    try {
      if (path === '/' || path === '/index.html') {
        if (req.method !== 'GET' && req.method !== 'HEAD') throw new HttpError(405, 'method not allowed');
        const nonce = randomToken();
        securityHeaders(res, nonce);
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(
          req.method === 'HEAD'
            ? undefined
            : renderPage({ nonce, tokenRequired: options.token !== undefined }),
        );
        return;
      }
      if (!path.startsWith('/api/')) throw new HttpError(404, 'not found');
      if (options.token !== undefined) {
        const auth = req.headers.authorization ?? '';
        const given = auth.startsWith('Bearer ') ? auth.slice(7) : '';
        if (!sameSecret(given, options.token))
          throw new HttpError(401, 'a valid token is required (Authorization: Bearer …)');
      }
      sampler.start();
      const route = path.slice('/api/'.length);
      if (route.startsWith('actions/')) {
        if (req.method !== 'POST') throw new HttpError(405, 'actions are POST requests');
        checkCsrf(req, csrf);
        if (!options.allowActions)
          throw new HttpError(403, 'actions are disabled (start the dashboard with --allow-actions)');
        const body = await readJson(req);
        send(res, 200, await api.action(route.slice('actions/'.length), body));
        return;
      }
      if (req.method !== 'GET') throw new HttpError(405, 'method not allowed');
      send(res, 200, await api.read(route, url.searchParams));
    } catch (error) {
      if (error instanceof HttpError) send(res, error.status, { error: error.message });
      else if (error instanceof InvalidArgumentError || error instanceof ConflictError)
        send(res, error instanceof ConflictError ? 409 : 400, { error: redactText(error.message, secrets) });
      else {
        logger.warn('dashboard request failed', {
          path,
          error: redactText(
            error instanceof Error ? `${error.name}: ${error.message}` : String(error),
            secrets,
          ),
        });
        const code = error instanceof DuetimeError ? error.code : undefined;
        send(res, 502, { error: `the backend failed${code ? ` (${code})` : ''}; see the server's log` });
      }
    }
  }

  return handler;
}

function securityHeaders(res: ServerResponse, nonce: string): void {
  res.setHeader(
    'content-security-policy',
    `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  );
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('x-frame-options', 'DENY');
  res.setHeader('referrer-policy', 'no-referrer');
  res.setHeader('cache-control', 'no-store');
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('cache-control', 'no-store');
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  // '<' as \u003c: a JSON answer never holds markup, even if something renders it as HTML.
  res.end(JSON.stringify(body).replace(/</g, '\\u003c'));
}

function checkCsrf(req: IncomingMessage, csrf: string): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') throw new HttpError(403, 'cross-site request refused');
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== 'null') {
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host !== req.headers.host) throw new HttpError(403, 'cross-origin request refused');
  }
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/json')) throw new HttpError(415, 'actions take application/json');
  const given = req.headers['x-duetime-csrf'];
  if (typeof given !== 'string' || !sameSecret(given, csrf))
    throw new HttpError(403, 'missing or wrong CSRF token');
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 16_384) throw new HttpError(413, 'request body too large');
    chunks.push(chunk as Buffer);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpError(400, 'the body must be JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(400, 'the body must be a JSON object');
  return body as Record<string, unknown>;
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
  /** The message's data as JSON text (cut at 4,000 characters). */
  data?: string;
  /** The trace id of the transaction that scheduled it, when the message carries one. */
  traceId?: string;
  recurrence?: RecurrenceView;
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
  data?: string;
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

class DashboardApi {
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
      case 'dead-letters':
        return this.#deadLetters(query);
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
    throw new HttpError(404, `no action ${JSON.stringify(name)}`);
  }

  async #overview() {
    const now = this.#store.clock.now();
    const limit = this.#countLimit;
    const [pending, due, dead] = await Promise.all([
      this.#store.pageSchedules({ limit }),
      this.#store.driver.dueSchedules(new Date(now), limit),
      this.#store.pageDeadLetters({ limit }),
    ]);
    const count = (n: number, more: boolean) => ({ count: n, more });
    return {
      now: new Date(now).toISOString(),
      backend: this.#options.backend.name ?? 'custom',
      label: this.#options.label ?? this.#options.backend.name ?? 'duetime',
      actions: this.#options.allowActions === true,
      csrf: this.#csrf,
      countLimit: limit,
      pending: count(pending.items.length, pending.next !== undefined),
      due: count(due.length, due.length >= limit),
      deadLetters: count(dead.items.length, dead.next !== undefined),
      oldestDue: due[0]?.dueAt.toISOString(),
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
      ...(prefix ? { prefix } : {}),
      ...(after ? { after } : {}),
    });
    return { items: page.items.map(deadLetterView), ...(page.next ? { next: page.next } : {}) };
  }

  /** Recurring schedules: a scan of up to `countLimit` schedules (there is no index of recurring ones). */
  async #recurring(query: URLSearchParams) {
    const prefix = optionalPrefix(query.get('prefix'));
    const items: ScheduleView[] = [];
    let scanned = 0;
    let after: SchedulePageCursor | undefined;
    while (scanned < this.#countLimit) {
      const page = await this.#store.pageSchedules({
        limit: Math.min(500, this.#countLimit - scanned),
        ...(prefix ? { prefix } : {}),
        ...(after ? { after } : {}),
      });
      scanned += page.items.length;
      for (const s of page.items) if (s.recurrence) items.push(scheduleView(s));
      if (!page.next) return { items, scanned, complete: true };
      after = page.next;
    }
    return { items, scanned, complete: false };
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

function dataText(data: unknown): string | undefined {
  if (data === undefined) return undefined;
  const text = JSON.stringify(data);
  return text.length > DATA_PREVIEW ? `${text.slice(0, DATA_PREVIEW)}…` : text;
}

function traceId(trace: Readonly<Record<string, string>> | undefined): string | undefined {
  const parent = trace?.traceparent;
  const match = parent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(parent) : null;
  return match?.[1];
}

function scheduleView(s: Schedule): ScheduleView {
  const data = dataText(s.message.data);
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
    ...(data !== undefined ? { data } : {}),
    ...(trace ? { traceId: trace } : {}),
    ...(s.recurrence ? { recurrence: recurrenceView(s.recurrence, s.at) } : {}),
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
  const data = dataText(d.message.data);
  return {
    key: d.key,
    version: d.version,
    at: d.at.toISOString(),
    deadAt: d.deadAt.toISOString(),
    attempts: d.attempts,
    error: d.error,
    type: d.message.type,
    ...(d.message.aggregateId !== undefined ? { aggregateId: d.message.aggregateId } : {}),
    ...(data !== undefined ? { data } : {}),
  };
}
