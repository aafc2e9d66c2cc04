import { open, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DeadLetterRecord, Event, Schedule, StoredState } from '@duetime/core';
import { BackendError, CorruptDataError, DuetimeError, decodeJson } from '@duetime/core';
import { HOLDER, withLock } from './lock.js';

/** A schedule as kept in the file: instants as epoch ms, its stored state (`recurrence`) as given. */
type Kept = Pick<Schedule, 'message' | 'version' | 'attempts' | 'lastError'>;
export type StoredSchedule = Kept & { at: number; dueAt: number; recurrence?: StoredState };

/** Everything one store holds. Tables are maps by key (in the file: lists of entries). */
export interface State {
  /** The store-wide version counter: every put takes the next one, so a key's versions only grow. */
  version: number;
  schedules: Map<string, StoredSchedule>;
  events: Map<string, Event[]>;
  dead: Map<string, Omit<DeadLetterRecord, 'at' | 'deadAt'> & { at: number; deadAt: number }>;
  /** Deliveries' claims by key: held until `until` (ms) unless renewed, or until process `pid` dies. */
  claims: Map<string, { version: number; token: string; pid: number; until: number }>;
  leases: Map<string, { owner: string; token: number; expiresAt: number }>;
  /** The last fencing token per lease key, kept after the lease is gone. */
  tokens: Map<string, number>;
  cursors: Map<string, { at: number; expiresAt: number }>;
}

const TABLES = ['schedules', 'events', 'dead', 'claims', 'leases', 'tokens', 'cursors'] as const;

/** The store's data file (see {@link dataFile}). */
export type DataFile = ReturnType<typeof dataFile>;

/**
 * The store's data: one JSON file, `<dir>/state.json`. Readers read it without a lock; every change reads
 * it under the directory's lock, changes it, and replaces it whole by an atomic rename of a synced
 * temporary file. A reader therefore sees the state before or after a change, never half of one, and a
 * process killed at any moment leaves the last complete state behind.
 */
export function dataFile(dir: string, lockTimeoutMs: number) {
  const path = join(dir, 'state.json');
  const text = () =>
    readFile(path, 'utf8').catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return '{"version":0}';
      throw failure('read', path, error);
    });
  const parse = (text: string): State => {
    const raw = decodeJson(text, path) as Record<string, unknown> | null;
    if (typeof raw?.version !== 'number') throw new CorruptDataError(`${path} holds no duetime data`);
    const state: Record<string, unknown> = { version: raw.version };
    for (const table of TABLES) state[table] = new Map(raw[table] as []);
    return state as unknown as State;
  };
  const replace = async (text: string) => {
    const temporary = join(dir, `.state-${HOLDER}.tmp`);
    try {
      const handle = await open(temporary, 'w');
      await handle
        .writeFile(text)
        .then(() => handle.datasync())
        .finally(() => handle.close());
      await rename(temporary, path);
    } catch (error) {
      throw failure('write', path, error);
    }
  };
  return {
    dir,
    path,
    /** The committed state. */
    read: async () => parse(await text()),
    /** Runs `fn` on the committed state under the lock and writes what it changed; a throw writes nothing. */
    update: <T>(fn: (state: State) => T): Promise<T> =>
      withLock(dir, lockTimeoutMs, async () => {
        const before = await text();
        const state = parse(before);
        const result = fn(state);
        const after = JSON.stringify(state, (_key, value) => (value instanceof Map ? [...value] : value));
        if (after !== before) await replace(after);
        return result;
      }),
    /** Tells watchers that schedules changed (see the store's `watch`): not synced, only a hint. */
    signal: () => writeFile(join(dir, 'changed'), HOLDER).catch(() => undefined),
  };
}

function failure(operation: string, path: string, error: unknown): Error {
  if (error instanceof DuetimeError) return error;
  return new BackendError(operation, `${path}: ${(error as Error).message}`, {
    cause: error,
    transient: true,
  });
}
