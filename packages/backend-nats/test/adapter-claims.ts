import type { Backend } from '@duetime/core';
import { NATS_STORE_URL, openOn } from './adapter.js';

/** A backend whose deliveries always claim across processes (`claims: 'always'`): `exclusiveClaims`. */
export async function open(namespace: string): Promise<Backend> {
  return openOn(NATS_STORE_URL, namespace, { claims: 'always' });
}
