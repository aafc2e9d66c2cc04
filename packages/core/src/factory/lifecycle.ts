import { ClosedError, InvalidArgumentError } from '../errors.js';
import type { CursorBackend, LeaseBackend, LeaseGrant, LeaseHolder } from '../lease/types.js';
import { duration, identifier, validDate } from '../validate.js';

/**
 * The open/closed state of one backend instance, shared by its parts: `check()` throws a ClosedError once
 * `close()` began, and `close()` runs the backend's clean-up exactly once (every caller gets the same
 * promise).
 *
 * @example
 * const life = new BackendLifecycle('redis backend (prefix billing)');
 * return {
 *   leases: guardLeases(new RedisLeases(...), life),
 *   cursors: guardCursors(new RedisCursors(...), life),
 *   close: () => life.close(async () => { await store.close(); await client.quit(); }),
 * };
 */
export class BackendLifecycle {
  /** Names the backend in ClosedErrors, e.g. `sqlite backend on /srv/app.db`. */
  #what: string;
  #closing: Promise<void> | undefined;

  constructor(what: string) {
    this.#what = what;
  }

  get what(): string {
    return this.#what;
  }

  /** Names the backend more precisely once it knows where its data lives. */
  rename(what: string): void {
    this.#what = what;
  }

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** Throws a ClosedError once the backend is closing or closed. */
  check(): void {
    if (this.#closing) throw new ClosedError(this.#what);
  }

  /** Runs `cleanUp` the first time; later calls return the same promise. */
  close(cleanUp: () => Promise<void> | void): Promise<void> {
    this.#closing ??= (async () => {
      await cleanUp();
    })();
    return this.#closing;
  }
}

/** Something that throws once its backend is closed: a {@link BackendLifecycle} or a function. */
export type ClosedCheck = Pick<BackendLifecycle, 'check'> | (() => void);

function checker(open: ClosedCheck): () => void {
  return typeof open === 'function' ? open : () => open.check();
}

/** A fencing token as a backend issued it: a positive safe integer. */
function fencingToken(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw new InvalidArgumentError('token', value, 'must be a fencing token (a positive integer)');
  return value;
}

/** A time to live: positive and finite. Not capped at a timer's range: a cursor may live for months. */
function ttl(value: unknown): number {
  return duration('ttlMs', value);
}

/**
 * Wraps an adapter's leases so that every call checks its arguments (`key` and `owner` identifiers,
 * `ttlMs` a positive duration, `token` a positive integer) and that the backend is open, before the
 * adapter sees it: adapters receive clean input only.
 *
 * @throws {InvalidArgumentError} naming the argument; {@link ClosedError} once the backend is closed.
 */
export function guardLeases(leases: LeaseBackend, open: ClosedCheck): LeaseBackend {
  const check = checker(open);
  return {
    async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
      identifier('key', key);
      identifier('owner', owner);
      ttl(ttlMs);
      check();
      return leases.acquire(key, owner, ttlMs);
    },
    async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
      identifier('key', key);
      identifier('owner', owner);
      fencingToken(token);
      ttl(ttlMs);
      check();
      return leases.renew(key, owner, token, ttlMs);
    },
    async release(key: string, owner: string, token: number): Promise<boolean> {
      identifier('key', key);
      identifier('owner', owner);
      fencingToken(token);
      check();
      return leases.release(key, owner, token);
    },
    async holder(key: string): Promise<LeaseHolder | undefined> {
      identifier('key', key);
      check();
      return leases.holder(key);
    },
  };
}

/**
 * Wraps an adapter's cursors so that every call checks its arguments (`key` an identifier, `at` a valid
 * Date, `ttlMs` a positive duration) and that the backend is open, before the adapter sees it.
 *
 * @throws {InvalidArgumentError} naming the argument; {@link ClosedError} once the backend is closed.
 */
export function guardCursors(cursors: CursorBackend, open: ClosedCheck): CursorBackend {
  const check = checker(open);
  return {
    async read(key: string): Promise<Date | undefined> {
      identifier('key', key);
      check();
      return cursors.read(key);
    },
    async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
      identifier('key', key);
      const instant = validDate('at', at);
      ttl(ttlMs);
      check();
      return cursors.advance(key, instant, ttlMs);
    },
  };
}
