import { type Backend, createMemoryBackend, MemoryDatabase } from '@duetime/core';

const databases = new Map<string, MemoryDatabase>();

/** An adapter module over the in-memory backend: one database per namespace, inside this process. */
export async function open(namespace: string): Promise<Backend> {
  let database = databases.get(namespace);
  if (!database) {
    database = new MemoryDatabase();
    databases.set(namespace, database);
  }
  return createMemoryBackend({ database });
}

/** The in-memory backend lives inside one process and does not outlive it. */
export const capabilities = { multiProcess: false, durable: false };

/** Forgets a namespace's database: the suite calls it after each test, so a run leaves nothing behind. */
export async function drop(namespace: string): Promise<void> {
  databases.delete(namespace);
}

/** How many namespaces hold data now (for the harness's own test). */
export function namespacesHeld(): number {
  return databases.size;
}
