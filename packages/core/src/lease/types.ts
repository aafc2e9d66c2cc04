/**
 * The contract a backend implements for leases: mutual exclusion by key with a time to live, judged by
 * the backend's own clock (never the caller's), and a fencing token that only grows per key.
 *
 * - `acquire` succeeds when the key is free or expired, or already held by the same owner (then it
 *   renews and keeps the token). A new holder always gets a token greater than every token issued
 *   before for that key, also after release and expiry.
 * - `renew` succeeds only while the caller still holds an unexpired lease with that token: an expired
 *   lease is never resurrected, even when nobody took it in between.
 * - `release` frees the key only for its holder (owner and token match).
 * - "Held by someone else" is a result (`undefined` / `false`); a failure to ask is an error. Never report
 *   an error as contention, nor contention as an error.
 */
export interface LeaseBackend {
  acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined>;
  renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined>;
  release(key: string, owner: string, token: number): Promise<boolean>;
  /** Who holds `key` now, if anyone (for snapshots and tools). */
  holder(key: string): Promise<LeaseHolder | undefined>;
}

export interface LeaseGrant {
  /** Fencing token: strictly greater than any token issued earlier for the key to another holding. */
  token: number;
}

export interface LeaseHolder {
  owner: string;
  token: number;
  /** Remaining time to live by the backend's clock, in milliseconds. */
  remainingMs: number;
}

/**
 * The contract a backend implements for calendar cursors: per key, the latest instant completed or
 * deliberately skipped. `advance` keeps the maximum (a smaller instant never moves it back) and refreshes
 * the time to live; an expired cursor reads as `undefined`.
 */
export interface CursorBackend {
  read(key: string): Promise<Date | undefined>;
  /** Stores `max(current, at)` with a time to live; returns the stored value. */
  advance(key: string, at: Date, ttlMs: number): Promise<Date>;
}
