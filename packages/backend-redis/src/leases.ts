import {
  CorruptDataError,
  type CursorBackend,
  type LeaseBackend,
  type LeaseGrant,
  type LeaseHolder,
} from '@duetime/core';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import type { ScriptRunner } from './scripts.js';

interface Context {
  keys: KeySpace;
  runner: ScriptRunner;
  target: string;
}

/**
 * Leases on Redis: one string per lease (`token owner`) expiring by `PX`, so expiry is judged by the server's
 * clock, never the caller's. Fencing tokens come from one store-wide `INCR` counter that release and expiry
 * leave alone, so every new holding gets a larger token than any before it.
 */
export class RedisLeases implements LeaseBackend {
  readonly #c: Context;

  constructor(context: Context) {
    this.#c = context;
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    const token = await this.#run(
      'lease acquire',
      key,
      'lease-acquire',
      [this.#c.keys.leaseToken],
      [owner, wholeMs(ttlMs)],
    );
    return token === null ? undefined : { token: toToken(token, this.#c.keys.lease(key)) };
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    const renewed = await this.#run(
      'lease renew',
      key,
      'lease-renew',
      [],
      [owner, String(token), wholeMs(ttlMs)],
    );
    return renewed === null ? undefined : { token: toToken(renewed, this.#c.keys.lease(key)) };
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    return (await this.#run('lease release', key, 'lease-release', [], [owner, String(token)])) === 1;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    const reply = await this.#run('lease holder', key, 'lease-holder', [], []);
    if (reply === null) return undefined;
    const [token, owner, remaining] = reply as [string, string, number];
    return {
      owner,
      token: toToken(token, this.#c.keys.lease(key)),
      remainingMs: Math.max(0, Number(remaining)),
    };
  }

  async #run(
    operation: string,
    key: string,
    script: 'lease-acquire' | 'lease-renew' | 'lease-release' | 'lease-holder',
    extraKeys: string[],
    args: string[],
  ): Promise<unknown> {
    const leaseKey = this.#c.keys.lease(key);
    try {
      return await this.#c.runner.run(script, [leaseKey, ...extraKeys], args);
    } catch (error) {
      throw mapRedisError(error, `${operation} ${JSON.stringify(key)}`, this.#c.target, leaseKey);
    }
  }
}

/** Calendar cursors: one string per cursor (ms since the epoch) expiring by `PX`; a script keeps the maximum. */
export class RedisCursors implements CursorBackend {
  readonly #c: Context;

  constructor(context: Context) {
    this.#c = context;
  }

  async read(key: string): Promise<Date | undefined> {
    const cursorKey = this.#c.keys.cursor(key);
    let value: string | null;
    try {
      value = await this.#c.runner.call((c) => c.get(cursorKey));
    } catch (error) {
      throw mapRedisError(error, `cursor read ${JSON.stringify(key)}`, this.#c.target, cursorKey);
    }
    return value === null ? undefined : toDate(value, cursorKey);
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    const cursorKey = this.#c.keys.cursor(key);
    try {
      const stored = await this.#c.runner.run(
        'cursor-advance',
        [cursorKey],
        [String(at.getTime()), wholeMs(ttlMs)],
      );
      return toDate(String(stored), cursorKey);
    } catch (error) {
      throw mapRedisError(error, `cursor advance ${JSON.stringify(key)}`, this.#c.target, cursorKey);
    }
  }
}

/** Redis takes whole milliseconds, at least 1 (core checked the number). */
function wholeMs(ms: number): string {
  return String(Math.max(1, Math.ceil(ms)));
}

function toToken(value: unknown, key: string): number {
  const token = Number(value);
  if (!Number.isSafeInteger(token) || token <= 0)
    throw new CorruptDataError(`key ${key} holds the fencing token ${String(value)}, not a positive integer`);
  return token;
}

function toDate(value: string, key: string): Date {
  if (!/^-?\d+$/.test(value)) throw new CorruptDataError(`key ${key} does not hold a duetime cursor`);
  return new Date(Number(value));
}
