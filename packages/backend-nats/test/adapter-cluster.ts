import type { Backend } from '@duetime/core';
import { openOn } from './adapter.js';

/** Every server of the three-node NATS cluster `bash scripts/services.sh up --clusters` starts. */
export const NATS_CLUSTER_URLS = (
  process.env.DUETIME_NATS_CLUSTER_URLS ?? 'nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233'
)
  .split(',')
  .map((url) => url.trim())
  .filter((url) => url !== '');

/** The conformance suite's entry for the cluster: streams with three replicas. */
export async function open(namespace: string): Promise<Backend> {
  return openOn(NATS_CLUSTER_URLS, namespace, { replicas: 3, claims: { ttlMs: 5000 } });
}
