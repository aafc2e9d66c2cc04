import {
  CorruptDataError,
  type CursorBackend,
  type LeaseBackend,
  type LeaseGrant,
  type LeaseHolder,
} from '@duetime/core';
import type { KeySpace } from './keys.js';
import type { LuaScriptName } from './lua/scripts.generated.js';
import type { ScriptRunner } from './scripts.js';

/**
 * Leases on Redis: one string per lease (`token owner`) expiring by `PX`, so expiry is judged by the server's
 * clock, never the caller's. Fencing tokens come from one store-wide `INCR` counter that release and expiry
 * leave alone, so every new holding gets a larger token than any before it.
 */
export class RedisLeases implements LeaseBackend {
  constructor(readonly c: { keys: KeySpace; runner: ScriptRunner }) {}

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    const extra = [this.c.keys.leaseToken];
    const token = await this.#run('lease acquire', key, 'lease-acquire', [owner, wholeMs(ttlMs)], extra);
    return token === null ? undefined : { token: toToken(token, this.c.keys.lease(key)) };
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    const renewed = await this.#run('lease renew', key, 'lease-renew', [
      owner,
      String(token),
      wholeMs(ttlMs),
    ]);
    return renewed === null ? undefined : { token: toToken(renewed, this.c.keys.lease(key)) };
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    return (await this.#run('lease release', key, 'lease-release', [owner, String(token)])) === 1;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    const reply = await this.#run('lease holder', key, 'lease-holder', []);
    if (reply === null) return undefined;
    const [token, owner, remaining] = reply as [string, string, number];
    const remainingMs = Math.max(0, Number(remaining));
    return { owner, token: toToken(token, this.c.keys.lease(key)), remainingMs };
  }

  #run(operation: string, key: string, script: LuaScriptName, args: string[], extra: string[] = []) {
    const leaseKey = this.c.keys.lease(key);
    return this.c.runner.script(
      `${operation} ${JSON.stringify(key)}`,
      script,
      [leaseKey, ...extra],
      args,
      leaseKey,
    );
  }
}

/** Calendar cursors: one string per cursor (ms since the epoch) expiring by `PX`; a script keeps the maximum. */
export class RedisCursors implements CursorBackend {
  constructor(readonly c: { keys: KeySpace; runner: ScriptRunner }) {}

  async read(key: string): Promise<Date | undefined> {
    const cursorKey = this.c.keys.cursor(key);
    const operation = `cursor read ${JSON.stringify(key)}`;
    const value = await this.c.runner.read(operation, cursorKey, (c) => c.get(cursorKey));
    return value === null ? undefined : toDate(value, cursorKey);
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    const cursorKey = this.c.keys.cursor(key);
    const args = [String(at.getTime()), wholeMs(ttlMs)];
    const operation = `cursor advance ${JSON.stringify(key)}`;
    return toDate(
      String(await this.c.runner.script(operation, 'cursor-advance', [cursorKey], args, cursorKey)),
      cursorKey,
    );
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
