import type { Backend } from '@duetime/core';
import { openOn } from './adapter.js';

/** The NATS server >= 2.12 that `bash scripts/services.sh up` provides where it can. */
export const NATS_NEW_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

/** The conformance suite's entry for the second run: a backend on the newer NATS server. */
export async function open(namespace: string): Promise<Backend> {
  return openOn(NATS_NEW_URL, namespace);
}
