import { type Backend, createMemoryBackend } from '@duetime/core';

/** An adapter module for the harness tests: every process gets its own in-memory data. */
export async function open(_namespace: string): Promise<Backend> {
  return createMemoryBackend();
}
