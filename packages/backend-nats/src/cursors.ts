import type { CursorBackend } from '@duetime/core';
import { lostRaces } from './errors.js';
import type { NatsIo } from './io.js';
import type { Layout } from './layout.js';
import type { ServerClock } from './server-clock.js';

interface CursorValue {
  at: number;
  ttl: number;
}

const MAX_ATTEMPTS = 100;

/**
 * Calendar cursors: one message per key holding the instant and its time to live. `advance` is a
 * compare-and-set loop on the subject's last sequence that stores the maximum, so concurrent advances
 * never move a cursor back. Expiry is judged by the server's clock, like leases.
 */
export class NatsCursors implements CursorBackend {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #clock: ServerClock;

  constructor(io: NatsIo, layout: Layout, clock: ServerClock) {
    this.#io = io;
    this.#layout = layout;
    this.#clock = clock;
  }

  async #observe(key: string) {
    const [message, now] = await Promise.all([
      this.#io.last(this.#layout.leaseStream, this.#layout.cursor(key)),
      this.#clock.now(),
    ]);
    const value = message?.json<CursorValue>();
    const live = message && value && message.time + value.ttl > now ? value.at : undefined;
    return { seq: message?.seq ?? 0, live };
  }

  async read(key: string): Promise<Date | undefined> {
    const { live } = await this.#observe(key);
    return live === undefined ? undefined : new Date(live);
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const { seq, live } = await this.#observe(key);
      const next = live === undefined ? at.getTime() : Math.max(live, at.getTime());
      const value: CursorValue = { at: next, ttl: ttlMs };
      const result = await this.#io.publish(this.#layout.cursor(key), JSON.stringify(value), {
        expectSubjectSeq: seq,
      });
      if (result !== 'conflict') return new Date(next);
    }
    throw lostRaces(`advance cursor ${JSON.stringify(key)}`, MAX_ATTEMPTS);
  }
}
