import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidArgumentError } from '@duetime/core';
import { createDashboard, type DashboardHandler, type DashboardOptions } from './handler.js';
import { isLoopback } from './security.js';

/** Options of {@link startDashboard}: the handler's, and where to listen. */
export interface StartDashboardOptions extends DashboardOptions {
  /** Address to bind (default `127.0.0.1`). Any address that is not loopback requires `token`. */
  host?: string;
  /** Port (default 4600; 0 picks a free one). */
  port?: number;
  /**
   * How long a client may take to send a request's headers, in ms (default 10,000). A slower client gets
   * 408 and its connection is closed.
   */
  headersTimeoutMs?: number;
  /**
   * How long a client may take to send a whole request, headers and body, in ms (default 30,000; at least
   * `headersTimeoutMs`). A slower client gets 408 and its connection is closed.
   */
  requestTimeoutMs?: number;
  /** How long a kept-alive connection may stay idle between requests, in ms (default 5,000). */
  keepAliveTimeoutMs?: number;
  /** Most connections open at once (default 100): the server closes further ones as they arrive. */
  maxConnections?: number;
}

/** The server's limits, in force. */
interface ServerLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
}

/** The defaults of the server's limits (see {@link StartDashboardOptions}). */
const SERVER_DEFAULTS: Readonly<ServerLimits> = Object.freeze({
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 100,
});

/** The longest delay a Node.js timer keeps (about 24.8 days). */
const MAX_TIMER_MS = 2_147_483_647;

export interface RunningDashboard {
  /** Where the page is, e.g. `http://127.0.0.1:4600/` (never with the token in it). */
  readonly url: string;
  readonly server: Server;
  readonly handler: DashboardHandler;
  /** Whether requests must carry the token. */
  readonly tokenRequired: boolean;
  close(): Promise<void>;
}

/**
 * Serves the dashboard on its own HTTP server. It binds 127.0.0.1 unless told otherwise, and refuses any
 * other address without a `token`. On a loopback address it also refuses requests whose `Host` header
 * names another host (a DNS-rebinding page cannot read it).
 */
export async function startDashboard(options: StartDashboardOptions): Promise<RunningDashboard> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 4600;
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new InvalidArgumentError('port', port, 'must be an integer from 0 to 65535');
  const loopback = isLoopback(host);
  if (!loopback && options.token === undefined)
    throw new InvalidArgumentError(
      'host',
      host,
      'is not a loopback address: binding it requires a token (--token, or DUETIME_DASHBOARD_TOKEN)',
    );
  const limits = serverLimits(options);
  const handler = createDashboard(options);
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // Node checks both timeouts on an interval (30 s by default): often enough to keep them.
      connectionsCheckingInterval: Math.max(
        10,
        Math.min(1000, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4)),
      ),
    },
    (req, res) => {
      if (loopback && !localHost(req.headers.host)) {
        res.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('this dashboard answers only to localhost names');
        return;
      }
      handler(req, res);
    },
  );
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.maxConnections = limits.maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}/`,
    server,
    handler,
    tokenRequired: options.token !== undefined,
    async close() {
      handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function localHost(header: string | undefined): boolean {
  if (!header) return false;
  const name = header.startsWith('[')
    ? header.slice(0, header.indexOf(']') + 1)
    : (header.split(':')[0] ?? '');
  return isLoopback(name);
}

/**
 * Reads the server's limits: whole milliseconds from 1 to 2^31 − 1 (the longest timer Node keeps), a
 * request timeout at least the headers timeout, a positive whole number of connections.
 *
 * @throws {InvalidArgumentError} naming `options.<name>` and the value.
 */
function serverLimits(options: StartDashboardOptions): ServerLimits {
  const ms = (name: 'headersTimeoutMs' | 'requestTimeoutMs' | 'keepAliveTimeoutMs'): number => {
    const value = options[name] ?? SERVER_DEFAULTS[name];
    if (!Number.isInteger(value) || value < 1 || value > MAX_TIMER_MS)
      throw new InvalidArgumentError(
        `options.${name}`,
        value,
        `must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS}`,
      );
    return value;
  };
  const headersTimeoutMs = ms('headersTimeoutMs');
  const requestTimeoutMs = ms('requestTimeoutMs');
  const keepAliveTimeoutMs = ms('keepAliveTimeoutMs');
  if (requestTimeoutMs < headersTimeoutMs)
    throw new InvalidArgumentError(
      'options.requestTimeoutMs',
      requestTimeoutMs,
      `must be at least options.headersTimeoutMs (${headersTimeoutMs}): the headers are part of the request`,
    );
  const maxConnections = options.maxConnections ?? SERVER_DEFAULTS.maxConnections;
  if (!Number.isInteger(maxConnections) || maxConnections < 1)
    throw new InvalidArgumentError('options.maxConnections', maxConnections, 'must be a positive integer');
  return { headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs, maxConnections };
}
