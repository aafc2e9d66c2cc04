import {
  BackendError,
  DuetimeError,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  redactUrl,
} from '@duetime/core';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { onStatus } from './io.js';

/**
 * Connecting to NATS: validating a `servers` value, opening a connection that never hangs, and reading
 * what the server can do. Shared by every part of this package that opens its own connection.
 */

/** Where to connect: one URL (`nats://host:port`, `tls://host:port`, `host:port`) or several. */
export type NatsServers = string | readonly string[];

export interface ConnectNatsOptions {
  /** How long to wait for the first connection (TCP and handshake), in milliseconds (default 5000). */
  connectTimeoutMs?: number;
  /** Shown by the server's monitoring pages (default `duetime`). */
  name?: string;
  /**
   * Reconnect attempts per server once connected; -1 (the default) never gives up, so components keep
   * running across server restarts.
   */
  maxReconnectAttempts?: number;
  /** Milliseconds between reconnect attempts (default 500). */
  reconnectTimeWaitMs?: number;
}

/** A server URL checked and split into the parts error messages may show (never the password). */
export interface ServerTarget {
  /** The URL as given. */
  given: string;
  /** `nats://host:port` without credentials, for messages. */
  display: string;
}

const SCHEMES = new Set(['nats:', 'tls:']);

/**
 * Checks a `servers` value and returns one target per server. Throws {@link InvalidArgumentError}
 * naming `field` and the offending value (with any password masked) for anything `connect` could not use.
 */
export function parseServers(value: unknown, field = 'servers'): ServerTarget[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list))
    throw new InvalidArgumentError(
      field,
      value,
      'must be a URL string or an array of them (nats://host:port)',
    );
  if (list.length === 0) throw new InvalidArgumentError(field, value, 'must name at least one server');
  return list.map((entry, index) => {
    const where = typeof value === 'string' ? field : `${field}[${index}]`;
    if (typeof entry !== 'string' || entry.trim() === '')
      throw new InvalidArgumentError(where, entry, 'must be a non-empty URL such as nats://127.0.0.1:4222');
    const text = entry.trim();
    const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `nats://${text}`;
    let url: URL;
    try {
      url = new URL(withScheme);
    } catch {
      throw new InvalidArgumentError(
        where,
        redactUrl(entry),
        'is not a valid URL (expected nats://host:port)',
      );
    }
    if (!SCHEMES.has(url.protocol))
      throw new InvalidArgumentError(
        where,
        redactUrl(entry),
        `has the scheme ${JSON.stringify(url.protocol.slice(0, -1))}; use nats:// or tls://`,
      );
    if (url.hostname === '') throw new InvalidArgumentError(where, redactUrl(entry), 'names no host');
    if (url.pathname !== '' && url.pathname !== '/')
      throw new InvalidArgumentError(where, redactUrl(entry), 'must not have a path');
    const port = url.port === '' ? 4222 : Number(url.port);
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new InvalidArgumentError(where, redactUrl(entry), 'has an invalid port');
    return { given: text, display: `${url.protocol}//${url.hostname}:${port}` };
  });
}

/**
 * Replaces the password of a URL-looking string with `***`.
 * @deprecated use `redactUrl` from `@duetime/core`.
 */
export const maskPassword: (text: string) => string = redactUrl;

/** `nats://a:4222, nats://b:4222`. */
export function describeTargets(targets: readonly ServerTarget[]): string {
  return targets.map((t) => t.display).join(', ');
}

/**
 * Opens a connection to `servers`. Rejects within `connectTimeoutMs` (never hangs) with a transient
 * {@link BackendError} naming the servers when none answers, or an {@link InvalidArgumentError} for a
 * malformed value. Once connected, the client reconnects by itself (forever by default).
 */
export async function connectNats(
  servers: NatsServers,
  options: ConnectNatsOptions & { field?: string } = {},
): Promise<NatsConnection> {
  const targets = parseServers(servers, options.field ?? 'servers');
  const timeout = duration('connectTimeoutMs', options.connectTimeoutMs ?? 5000, { max: MAX_TIMER_MS });
  const operation = `connect to ${describeTargets(targets)}`;
  let timer: NodeJS.Timeout | undefined;
  const attempt = connect({
    servers: targets.map((t) => t.given),
    name: options.name ?? 'duetime',
    timeout,
    maxReconnectAttempts: options.maxReconnectAttempts ?? -1,
    reconnectTimeWait: options.reconnectTimeWaitMs ?? 500,
    reconnectJitter: 100,
    waitOnFirstConnect: false,
    pingInterval: 10_000,
    maxPingOut: 3,
  });
  try {
    // `timeout` bounds the handshake; this bounds everything else (DNS, a server that never answers).
    return await Promise.race([
      attempt,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new BackendError(operation, `no answer within ${timeout} ms`, { transient: true })),
          timeout + 250,
        );
      }),
    ]);
  } catch (error) {
    // A connection that completes after the deadline must not stay open unowned.
    void attempt.then((nc) => nc.close()).catch(() => {});
    if (error instanceof DuetimeError) throw error;
    throw new BackendError(operation, describeConnectFailure(error), { cause: error, transient: true });
  } finally {
    clearTimeout(timer);
  }
}

function describeConnectFailure(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'ECONNREFUSED' || /refused/i.test(message))
    return `connection refused: no NATS server listens there (${message}); check the URL, or start nats-server with JetStream (nats-server -js)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `host not found (${message})`;
  if (/timeout/i.test(message)) return `no answer in time (${message})`;
  if (/authorization|authentication/i.test(message)) return `the server refused the credentials (${message})`;
  return message;
}

/** A server version as numbers. */
export interface ServerVersion {
  major: number;
  minor: number;
  patch: number;
  /** As the server reports it, e.g. `2.9.10`. */
  text: string;
}

/** The version of the server `nc` is connected to (throws when not connected). */
export function serverVersion(nc: NatsConnection): ServerVersion {
  const text = nc.info?.version;
  if (typeof text !== 'string')
    throw new BackendError('read the server version', 'the connection is closed or not established', {
      transient: true,
    });
  const [major = 0, minor = 0, patch = 0] = text
    .replace(/^v/, '')
    .split(/[.-]/)
    .slice(0, 3)
    .map((part) => Number.parseInt(part, 10) || 0);
  return { major, minor, patch, text };
}

/** Whether `version` is at least `major.minor.patch`. */
export function versionAtLeast(version: ServerVersion, major: number, minor = 0, patch = 0): boolean {
  if (version.major !== major) return version.major > major;
  if (version.minor !== minor) return version.minor > minor;
  return version.patch >= patch;
}

/** Throws a {@link BackendError} naming the server when JetStream is not enabled on it. */
export function requireJetStream(nc: NatsConnection, operation: string): void {
  if (nc.info && nc.info.jetstream !== true)
    throw new BackendError(
      operation,
      `the NATS server at ${nc.getServer()} runs without JetStream; start nats-server with -js`,
    );
}

/** Checks that `value` looks like a NATS connection the application passed in. */
export function checkConnection(value: unknown, field = 'connection'): NatsConnection {
  const nc = value as Partial<NatsConnection> | null;
  if (
    typeof nc !== 'object' ||
    nc === null ||
    typeof nc.request !== 'function' ||
    typeof nc.subscribe !== 'function' ||
    typeof nc.isClosed !== 'function'
  )
    throw new InvalidArgumentError(field, value, 'must be a NatsConnection from @nats-io/transport-node');
  if (nc.isClosed()) throw new InvalidArgumentError(field, '[closed NatsConnection]', 'is already closed');
  return nc as NatsConnection;
}

/**
 * Logs disconnects and reconnects of `nc` until the returned function is called. Safe on a connection
 * the application owns: it only listens.
 */
export function logConnectionStatus(nc: NatsConnection, logger: Logger, what: string): () => void {
  return onStatus(nc, (status) => {
    if (status.type === 'disconnect')
      logger.warn(`${what}: disconnected from NATS`, { server: status.server });
    else if (status.type === 'reconnect')
      logger.info(`${what}: reconnected to NATS`, { server: status.server });
  });
}
