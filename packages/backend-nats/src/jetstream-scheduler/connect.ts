import { BackendError, InvalidArgumentError } from '@duetime/core';
import { connect, type NatsConnection } from '@nats-io/transport-node';

/** Options of {@link connectNats}. */
export interface NatsConnectOptions {
  /** How long to wait for the server to answer, in milliseconds (default 5000). */
  timeout?: number;
  /** Connection name shown by the server's monitoring. */
  name?: string;
}

const URL_FORM = /^(nats|tls|ws|wss):\/\/[^\s/]+$|^[^\s:/]+(:\d+)?$/;

/**
 * Connects to NATS for the scheduler: validates the URLs, waits at most `timeout`, keeps reconnecting
 * forever once connected (components ride out server restarts).
 *
 * @throws {InvalidArgumentError} naming `servers` for a malformed URL.
 * @throws {BackendError} (transient) naming the servers when none answers in time.
 */
export async function connectNats(
  servers: string | string[],
  options: NatsConnectOptions = {},
): Promise<NatsConnection> {
  const list = Array.isArray(servers) ? servers : [servers];
  if (list.length === 0) throw new InvalidArgumentError('servers', servers, 'must name at least one server');
  for (const url of list)
    if (typeof url !== 'string' || !URL_FORM.test(url))
      throw new InvalidArgumentError('servers', url, 'must be a NATS URL such as nats://127.0.0.1:4222');
  const timeout = options.timeout ?? 5_000;
  try {
    return await connect({
      servers: list,
      timeout,
      maxReconnectAttempts: -1,
      ...(options.name ? { name: options.name } : {}),
    });
  } catch (error) {
    throw new BackendError(
      `connect to ${list.join(', ')}`,
      `no NATS server answered within ${timeout} ms (${(error as Error).message})`,
      { cause: error, transient: true },
    );
  }
}
