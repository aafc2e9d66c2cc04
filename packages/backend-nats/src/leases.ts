import { CorruptDataError, type LeaseBackend, type LeaseGrant, type LeaseHolder } from '@duetime/core';
import { lostRaces } from './errors.js';
import { type NatsIo, ROLLUP, type StoredMessage } from './io.js';
import type { ServerClock } from './server-clock.js';

/**
 * Where leases and the server-clock probe live: a stream and subjects in it. The backend's `Layout` is one
 * (`<prefix>_lease`, a stream that keeps one message per subject); the JetStream scheduler gives its own
 * stream, which keeps many messages on other subjects, with `rollup: true`.
 */
export interface LeaseLayout {
  readonly leaseStream: string;
  /** The subject of the lease `key`. */
  lease(key: string): string;
  /** The server-clock probe's subject (see {@link ServerClock}). */
  readonly clock: string;
  /**
   * Whether every write carries `Nats-Rollup: sub`, so that the subject keeps its last message only (for a
   * stream without `max_msgs_per_subject: 1`; it needs `allow_rollup_hdrs`). Default false.
   */
  readonly rollup?: boolean;
}

/** A lease as stored: who holds it, for how long after this write, and its fencing token. */
interface LeaseValue {
  owner: string;
  ttl: number;
  /** 0 on the write that acquired the lease: the token is that message's sequence. */
  token: number;
}

/** Attempts of a compare-and-set loop before giving up (each lost attempt means someone else wrote). */
const MAX_ATTEMPTS = 50;

interface Observed {
  message: StoredMessage | undefined;
  value: LeaseValue | undefined;
  /** The value when it is still live by the server's clock. */
  live: (LeaseValue & { token: number; expiresAt: number }) | undefined;
  now: number;
}

/**
 * Leases on a stream that keeps one message per lease key. Writes are compare-and-set on the subject's
 * last sequence (`Nats-Expected-Last-Subject-Sequence`). The fencing token is the stream sequence of the
 * write that acquired the lease: sequences only grow, so a later holder always gets a larger token, also
 * after release (the subject is purged) and expiry. Expiry is judged by the server: a lease lives until
 * the server timestamp of its last write plus its TTL, compared with {@link ServerClock} (a lower bound of
 * the server's time, so a lease is never taken over early).
 */
export class NatsLeases implements LeaseBackend {
  readonly #io: NatsIo;
  readonly #layout: LeaseLayout;
  readonly #clock: ServerClock;

  constructor(io: NatsIo, layout: LeaseLayout, clock: ServerClock) {
    this.#io = io;
    this.#layout = layout;
    this.#clock = clock;
  }

  async #observe(key: string): Promise<Observed> {
    const [message, now] = await Promise.all([
      this.#io.last(this.#layout.leaseStream, this.#layout.lease(key)),
      this.#clock.now(),
    ]);
    const value = message ? leaseValue(message) : undefined;
    const live =
      message && value && message.time + value.ttl > now
        ? { ...value, token: value.token || message.seq, expiresAt: message.time + value.ttl }
        : undefined;
    return { message, value, live, now };
  }

  async #write(key: string, value: LeaseValue, expected: number): Promise<number | undefined> {
    const result = await this.#io.publish(this.#layout.lease(key), JSON.stringify(value), {
      expectSubjectSeq: expected,
      ...(this.#layout.rollup ? { headers: ROLLUP } : {}),
    });
    return result === 'conflict' ? undefined : result.seq;
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const seen = await this.#observe(key);
      if (seen.live && seen.live.owner !== owner) return undefined;
      const expected = seen.message?.seq ?? 0;
      if (seen.live) {
        // Held by the same owner: renew, keeping the token.
        const token = seen.live.token;
        if ((await this.#write(key, { owner, ttl: ttlMs, token }, expected)) !== undefined) return { token };
        continue;
      }
      const seq = await this.#write(key, { owner, ttl: ttlMs, token: 0 }, expected);
      if (seq !== undefined) return { token: seq };
    }
    throw lostRaces(`acquire lease ${JSON.stringify(key)}`, MAX_ATTEMPTS);
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const seen = await this.#observe(key);
      if (!seen.live || seen.live.owner !== owner || seen.live.token !== token) return undefined;
      const written = await this.#write(key, { owner, ttl: ttlMs, token }, seen.message?.seq ?? 0);
      if (written !== undefined) return { token };
    }
    throw lostRaces(`renew lease ${JSON.stringify(key)}`, MAX_ATTEMPTS);
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    const seen = await this.#observe(key);
    if (!seen.live || !seen.message || seen.live.owner !== owner || seen.live.token !== token) return false;
    // Purging below the next sequence removes this holding only; a newer write would survive.
    await this.#io.purge(this.#layout.leaseStream, {
      filter: this.#layout.lease(key),
      before: seen.message.seq + 1,
    });
    return true;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    const seen = await this.#observe(key);
    if (!seen.live) return undefined;
    return {
      owner: seen.live.owner,
      token: seen.live.token,
      remainingMs: Math.max(0, Math.min(seen.live.ttl, seen.live.expiresAt - seen.now)),
    };
  }
}

/** The lease a message holds; a message that is not one is refused, naming its subject and sequence. */
function leaseValue(message: StoredMessage): LeaseValue {
  let value: Partial<LeaseValue> | undefined;
  try {
    value = message.json<Partial<LeaseValue>>();
  } catch {}
  if (
    typeof value !== 'object' ||
    value === null ||
    typeof value.owner !== 'string' ||
    typeof value.ttl !== 'number' ||
    typeof value.token !== 'number'
  )
    throw new CorruptDataError(
      `message ${message.seq} on ${message.subject} is not a duetime lease ({ owner, ttl, token } as JSON)`,
    );
  return value as LeaseValue;
}
