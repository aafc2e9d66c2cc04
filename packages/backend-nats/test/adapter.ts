import { type Backend, BackendError } from '@duetime/core';
import {
  connectNats,
  createNatsBackend,
  deleteNatsBackendData,
  type NatsBackendOptions,
} from '../src/index.js';

/** The NATS server of the machine (2.9.10 on Debian's package): leases, cursors and the emulated pump. */
export const NATS_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
/** The NATS server >= 2.12 that `bash scripts/services.sh up` provides: the store needs it. */
export const NATS_STORE_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

const opened = new Map<string, string | string[]>();

/**
 * Opens a backend on `url` whose streams are named from `namespace` (a fresh namespace is isolated).
 * Fails with a message naming the service and how to start it when the server does not answer.
 */
export async function openOn(
  url: string | string[],
  namespace: string,
  options: NatsBackendOptions = {},
): Promise<Backend> {
  opened.set(namespace, url);
  try {
    return await createNatsBackend(
      { servers: url },
      { prefix: namespace, connectTimeoutMs: 3000, ...options },
    );
  } catch (error) {
    if (error instanceof BackendError && error.transient)
      throw new Error(
        `NATS with JetStream does not answer at ${String(url)} (${error.message}); start it with: bash scripts/services.sh up --clusters`,
        { cause: error },
      );
    throw error;
  }
}

/** The conformance suite's entry: a backend on the shared NATS server >= 2.12. */
export async function open(namespace: string): Promise<Backend> {
  return openOn(NATS_STORE_URL, namespace, { claims: { ttlMs: 5000 } });
}

/** Deletes the streams of every namespace this process opened. */
export async function deleteOpened(): Promise<void> {
  const byUrl = new Map<string, string[]>();
  for (const [namespace, url] of opened) {
    const where = String(url);
    byUrl.set(where, [...(byUrl.get(where) ?? []), namespace]);
  }
  opened.clear();
  for (const [url, namespaces] of byUrl) {
    const nc = await connectNats(url.split(','), { connectTimeoutMs: 3000 }).catch(() => undefined);
    if (!nc) continue;
    try {
      for (const namespace of namespaces) await deleteNatsBackendData(nc, namespace).catch(() => {});
    } finally {
      await nc.close();
    }
  }
}
