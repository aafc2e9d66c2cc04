import type { Backend, Clock, Logger } from '@duetime/core';

/** Opens the NATS backend on `url` with the stream prefix `prefix`. */
export async function openNats(
  _url: string,
  _prefix: string,
  _options: { clock?: Clock; logger?: Logger },
): Promise<Backend> {
  throw new Error('the NATS backend is not part of the suite yet');
}

/** Deletes the streams and buckets of `prefix`. */
export async function dropNats(_url: string, _prefix: string): Promise<void> {}

/** Opens the NATS backend with fuzzed factory arguments (for the hostile-input tests). */
export async function openNatsFuzzed(_connection: unknown, _options: unknown): Promise<Backend> {
  throw new Error('the NATS backend is not part of the suite yet');
}
