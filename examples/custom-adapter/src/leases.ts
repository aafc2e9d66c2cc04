import type { Clock, CursorBackend, LeaseBackend } from '@duetime/core';
import type { DataFile, State } from './data.js';

/**
 * Leases in the data file, judged by this host's clock read under the lock (every process sharing the
 * directory is on this host). Core's guard has checked every argument already.
 */
export function fileLeases(file: DataFile, clock: Clock): LeaseBackend {
  const live = (state: State, key: string) => {
    const lease = state.leases.get(key);
    return lease && lease.expiresAt > clock.now() ? lease : undefined;
  };
  return {
    /** Free or expired: a new holder, with a token above every one this key had. The holder's: renewed. */
    acquire: (key, owner, ttlMs) =>
      file.update((state) => {
        const lease = live(state, key);
        if (lease && lease.owner !== owner) return undefined;
        const token = lease?.token ?? (state.tokens.get(key) ?? 0) + 1;
        state.tokens.set(key, token);
        state.leases.set(key, { owner, token, expiresAt: clock.now() + ttlMs });
        return { token };
      }),
    /** Only a live lease of this owner and token: an expired one is never brought back. */
    renew: (key, owner, token, ttlMs) =>
      file.update((state) => {
        const lease = live(state, key);
        if (lease?.owner !== owner || lease.token !== token) return undefined;
        state.leases.set(key, { ...lease, expiresAt: clock.now() + ttlMs });
        return { token };
      }),
    release: (key, owner, token) =>
      file.update((state) => {
        const lease = live(state, key);
        return lease?.owner === owner && lease.token === token && state.leases.delete(key);
      }),
    async holder(key) {
      const lease = live(await file.read(), key);
      return lease && { owner: lease.owner, token: lease.token, remainingMs: lease.expiresAt - clock.now() };
    },
  };
}

/** Cursors in the data file: `advance` keeps the maximum, under the lock; an expired one reads as absent. */
export function fileCursors(file: DataFile, clock: Clock): CursorBackend {
  const current = (state: State, key: string) => {
    const cursor = state.cursors.get(key);
    return cursor && cursor.expiresAt > clock.now() ? cursor.at : undefined;
  };
  return {
    async read(key) {
      const at = current(await file.read(), key);
      return at === undefined ? undefined : new Date(at);
    },
    advance: (key, at, ttlMs) =>
      file.update((state) => {
        const next = Math.max(current(state, key) ?? +at, +at);
        state.cursors.set(key, { at: next, expiresAt: clock.now() + ttlMs });
        return new Date(next);
      }),
  };
}
