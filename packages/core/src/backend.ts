import type { CursorBackend, LeaseBackend } from './lease/types.js';
import type { Store } from './store/store.js';

/**
 * What a backend guarantees beyond the baseline, declared so that the conformance suite checks the
 * promise actually made. Every field defaults to the strong guarantee.
 */
export interface BackendCapabilities {
  /**
   * Several processes can open the same data (default true). The in-memory backend cannot: it lives
   * inside one process.
   */
  multiProcess?: boolean;
  /**
   * Data survives the process that wrote it (default true). False only for the in-memory backend.
   */
  durable?: boolean;
  /**
   * `tx.sql` gives the application its own queries inside the transaction (SQL backends).
   */
  sql?: boolean;
  /**
   * Two dispatchers never run the processor for the same schedule at once (`FOR UPDATE SKIP LOCKED` or a
   * claim). Without it, both may run it and exactly one commits (the other's writes roll back).
   */
  exclusiveClaims?: boolean;
}

/** One backend instance: the store for transactional schedules, leases and cursors for calendars. */
export interface Backend<Sql = unknown> {
  /** A short name, e.g. `sqlite`, `postgres`. */
  readonly name: string;
  readonly store: Store<Sql>;
  readonly leases: LeaseBackend;
  readonly cursors: CursorBackend;
  readonly capabilities: BackendCapabilities;
  /** Closes what this backend opened (connections it created; never a client the application passed in). */
  close(): Promise<void>;
}
