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
}

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
  const handler = createDashboard(options);
  const server = createServer((req, res) => {
    if (loopback && !localHost(req.headers.host)) {
      res.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' });
      res.end('this dashboard answers only to localhost names');
      return;
    }
    handler(req, res);
  });
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
