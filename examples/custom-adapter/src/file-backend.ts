import {
  type Backend,
  type BackendCapabilities,
  createStore,
  defaultLogger,
  duration,
  InvalidArgumentError,
  type Logger,
  positiveInteger,
} from '@duetime/core';
import { Journal } from './journal.js';
import { JournalCursors, JournalLeases } from './leases.js';
import { State } from './state.js';
import { JournalStoreDriver } from './store-driver.js';

export interface FileBackendOptions {
  /** The directory holding the data (created when missing). Every process opening it shares the data. */
  directory: string;
  /** How long to wait for another process holding the lock, in ms (default 10,000). */
  lockTimeoutMs?: number;
  /** Compact the journal into one snapshot once it has grown by this many bytes (default 4 MiB). */
  compactBytes?: number;
  logger?: Logger;
}

/** What this backend promises: everything but `tx.sql` and exclusive claims. */
export const fileBackendCapabilities: BackendCapabilities = {
  multiProcess: true,
  durable: true,
  sql: false,
  exclusiveClaims: false,
};

/**
 * A duetime backend over a directory: `journal.jsonl` (one line per commit, fsynced) guarded by a lock
 * directory, for processes on one host. Opening replays the journal; a directory that cannot be created
 * or read fails here, with a BackendError naming it.
 */
export async function createFileBackend(options: FileBackendOptions): Promise<Backend<undefined>> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError('options', options, 'must be an object { directory, ... }');
  if (typeof options.directory !== 'string' || options.directory.length === 0)
    throw new InvalidArgumentError('options.directory', options.directory, 'must be a non-empty path');
  const logger = options.logger ?? defaultLogger;
  const state = new State();
  const journal = await Journal.open(options.directory, state, {
    lockTimeoutMs: duration('options.lockTimeoutMs', options.lockTimeoutMs ?? 10_000),
    compactBytes: positiveInteger('options.compactBytes', options.compactBytes ?? 4 * 1024 * 1024),
    logger,
  });
  const store = createStore(new JournalStoreDriver(journal, state), { logger });
  return {
    name: 'file-journal',
    store,
    leases: new JournalLeases(journal, state),
    cursors: new JournalCursors(journal, state),
    capabilities: fileBackendCapabilities,
    // The store closes its driver, which closes the journal that leases and cursors share.
    close: () => store.close(),
  };
}
