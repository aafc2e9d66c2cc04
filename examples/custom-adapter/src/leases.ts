import type { CursorBackend, LeaseBackend, LeaseGrant, LeaseHolder } from '@duetime/core';
import type { Journal } from './journal.js';
import type { JournalRecord, Snapshot, State } from './state.js';

/**
 * Leases over the journal. Every decision is made under the directory lock, on caught-up state, with the
 * time read after the lock was taken: the host clock judges, and every process is on this host, so all of
 * them judge by the same clock. A grant is durable (fsynced) before it is returned; fencing tokens come
 * from `State.tokens`, which remembers the last token per key through releases, expiries and compactions.
 */
export class JournalLeases implements LeaseBackend {
  constructor(
    readonly journal: Journal<JournalRecord, Snapshot>,
    readonly state: State,
  ) {}

  #live(key: string, now: number) {
    const lease = this.state.leases.get(key);
    return lease && lease.expiresAt > now ? lease : undefined;
  }

  acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.journal.write(() => {
      const now = Date.now();
      const live = this.#live(key, now);
      if (live && live.owner !== owner) return { result: undefined };
      // The same owner re-acquiring renews and keeps its token; a new holder gets the next one.
      const token = live ? live.token : (this.state.tokens.get(key) ?? 0) + 1;
      return { record: { type: 'lease', key, owner, token, expiresAt: now + ttlMs }, result: { token } };
    });
  }

  renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.journal.write(() => {
      const now = Date.now();
      const live = this.#live(key, now);
      // An expired lease is never renewed, even when nobody took it since.
      if (!live || live.owner !== owner || live.token !== token) return { result: undefined };
      return { record: { type: 'lease', key, owner, token, expiresAt: now + ttlMs }, result: { token } };
    });
  }

  release(key: string, owner: string, token: number): Promise<boolean> {
    return this.journal.write(() => {
      const live = this.#live(key, Date.now());
      if (!live || live.owner !== owner || live.token !== token) return { result: false };
      return { record: { type: 'release', key }, result: true };
    });
  }

  holder(key: string): Promise<LeaseHolder | undefined> {
    return this.journal.read(() => {
      const now = Date.now();
      const live = this.#live(key, now);
      return live ? { owner: live.owner, token: live.token, remainingMs: live.expiresAt - now } : undefined;
    });
  }
}

/** Calendar cursors over the journal: `advance` keeps the maximum and refreshes the time to live. */
export class JournalCursors implements CursorBackend {
  constructor(
    readonly journal: Journal<JournalRecord, Snapshot>,
    readonly state: State,
  ) {}

  read(key: string): Promise<Date | undefined> {
    return this.journal.read(() => {
      const cursor = this.state.cursors.get(key);
      return cursor && cursor.expiresAt > Date.now() ? new Date(cursor.at) : undefined;
    });
  }

  advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    return this.journal.write(() => {
      const now = Date.now();
      const cursor = this.state.cursors.get(key);
      const current = cursor && cursor.expiresAt > now ? cursor.at : Number.NEGATIVE_INFINITY;
      const next = Math.max(current, at.getTime());
      return { record: { type: 'cursor', key, at: next, expiresAt: now + ttlMs }, result: new Date(next) };
    });
  }
}
