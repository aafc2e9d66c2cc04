import { connectNats, createNatsBackend, deleteNatsBackendData } from '@duetime/backend-nats';
import type { Backend, Clock, Logger } from '@duetime/core';

/** Opens the NATS backend on `url` with the stream prefix `prefix`. */
export async function openNats(
  url: string,
  prefix: string,
  options: { clock?: Clock; logger?: Logger; commitTimeoutMs?: number },
): Promise<Backend> {
  return createNatsBackend({ servers: url }, { prefix, connectTimeoutMs: 3000, ...options });
}

/** Deletes the streams of `prefix`. */
export async function dropNats(url: string, prefix: string): Promise<void> {
  const nc = await connectNats(url, { connectTimeoutMs: 3000 });
  try {
    await deleteNatsBackendData(nc, prefix);
  } finally {
    await nc.close();
  }
}

/** Opens the NATS backend with fuzzed factory arguments (for the hostile-input tests). */
export function openNatsFuzzed(connection: unknown, options: unknown): Promise<Backend> {
  return createNatsBackend(connection as never, options as never);
}
