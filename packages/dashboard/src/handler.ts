import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type Backend,
  ConflictError,
  type DeliveryEvent,
  type DispatcherSnapshot,
  DuetimeError,
  InvalidArgumentError,
  type Logger,
  NotFoundError,
  type Scheduler,
  silentLogger,
} from '@duetime/core';
import { DashboardApi, HttpError } from './api.js';
import { renderPage } from './page.js';
import { LatenessSampler } from './sampler.js';
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

/** What the dashboard uses of an in-process `Dispatcher` (any `Dispatcher<M, Sql>` fits). */
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
   * Enables the write actions (retry a dead letter; cancel, pause, resume or trigger a schedule), each
   * confirmed in the page and
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
        allowMethods(req, 'GET', 'HEAD');
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
          throw new HttpError(401, 'a valid token is required (Authorization: Bearer …)', {
            'www-authenticate': 'Bearer',
          });
      }
      sampler.start();
      const route = path.slice('/api/'.length);
      if (route.startsWith('actions/')) {
        // Read-only: every action request is refused, whatever its method, headers or body (never read).
        if (!options.allowActions)
          throw new HttpError(403, 'actions are disabled (start the dashboard with --allow-actions)');
        allowMethods(req, 'POST');
        checkCsrf(req, csrf);
        const body = await readJson(req);
        send(res, 200, await api.action(route.slice('actions/'.length), body));
        return;
      }
      allowMethods(req, 'GET');
      send(res, 200, await api.read(route, url.searchParams));
    } catch (error) {
      if (error instanceof HttpError) {
        for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
        // An unread request body is not waited for: the connection closes after the answer.
        if (!req.complete) res.setHeader('connection', 'close');
        send(res, error.status, { error: error.message });
      } else if (
        error instanceof InvalidArgumentError ||
        error instanceof ConflictError ||
        error instanceof NotFoundError
      )
        send(res, error instanceof ConflictError ? 409 : error instanceof NotFoundError ? 404 : 400, {
          error: redactText(error.message, secrets),
        });
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
  // '<' as \u003c: a JSON answer never holds markup, even if something renders it as HTML.
  const text = JSON.stringify(body).replace(/</g, '\\u003c');
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/** Refuses a method other than `allowed` with a 405 carrying `Allow`. */
function allowMethods(req: IncomingMessage, ...allowed: string[]): void {
  if (!allowed.includes(req.method ?? ''))
    throw new HttpError(405, `method not allowed (allowed: ${allowed.join(', ')})`, {
      allow: allowed.join(', '),
    });
}

/**
 * The rules an action request must pass before its body is read: sent by the page itself
 * (`Sec-Fetch-Site: same-origin` when the browser sends it; an `Origin`, when present, naming this host,
 * `null` included as refused), as `application/json`, with the handler's CSRF token.
 */
function checkCsrf(req: IncomingMessage, csrf: string): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') throw new HttpError(403, 'cross-site request refused');
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let host: string | undefined;
    try {
      // `Origin: null` (a sandboxed frame, a file, a redirect across origins) parses to no host.
      host = origin === 'null' ? undefined : new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host === undefined || host !== req.headers.host)
      throw new HttpError(403, 'cross-origin request refused');
  }
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/json')) throw new HttpError(415, 'actions take application/json');
  const given = req.headers['x-duetime-csrf'];
  if (typeof given !== 'string' || !sameSecret(given, csrf))
    throw new HttpError(403, 'missing or wrong CSRF token');
}

/** The largest action body read (an action's body is `{ "key": "…" }`, a key at most 512 characters). */
const BODY_LIMIT = 16_384;

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > BODY_LIMIT) throw new HttpError(413, `request body too large (at most ${BODY_LIMIT} bytes)`);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > BODY_LIMIT) throw new HttpError(413, `request body too large (at most ${BODY_LIMIT} bytes)`);
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    // The client went away, or the server's request timeout closed the connection.
    throw new HttpError(400, 'the request body was not received in full');
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
