import { connectNats, createNatsBackend, deleteNatsBackendData } from '@duetime/backend-nats';
import type { Backend, Clock, Logger } from '@duetime/core';

/** Opens the NATS backend on `servers` (one URL, or every server of a cluster) with the stream prefix `prefix`. */
export async function openNats(
  servers: string | string[],
  prefix: string,
  options: {
    clock?: Clock;
    logger?: Logger;
    commitTimeoutMs?: number;
    replicas?: number;
    claims?: { ttlMs: number };
  },
): Promise<Backend> {
  return createNatsBackend({ servers }, { prefix, connectTimeoutMs: 3000, ...options });
}

/** Deletes the streams of `prefix`. */
export async function dropNats(servers: string | string[], prefix: string): Promise<void> {
  const nc = await connectNats(servers, { connectTimeoutMs: 3000 });
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
