import type { Logger } from '@duetime/core';
import type { NatsIo } from '../io.js';
import type { Layout } from '../layout.js';
import type { Found } from './due.js';

/**
 * Delivery claims across processes: before a delivery runs a schedule, it writes a claim marker for the
 * schedule's key (`c.<key>`, naming the record sequence it claims) with `Nats-Expected-Last-Subject-
 * Sequence: 0` (no live claim there) and a per-message TTL (`Nats-TTL`), so one process at a time runs it;
 * others skip it until the marker is released or expires. Markers are renewed while their delivery is
 * open and removed when it gives a schedule back. A marker for an older record (the schedule was
 * replaced, or consumed and scheduled again) does not hold the new one.
 *
 * Claims save duplicate work; they are not what keeps effects single: every consumption is a
 * compare-and-set on the schedule's record at commit, claimed or not. Modes:
 * - `auto` (default): claim once other processes are seen delivering from the same store (a consumption
 *   refused because another process consumed first, or another process's marker met), for a minute after
 *   the last sighting. A process alone pays nothing.
 * - `always`: claim every delivery (the backend then declares `exclusiveClaims`).
 * - `off`.
 */
export type ClaimMode = 'auto' | 'always' | 'off';

export interface ClaimSettings {
  mode: ClaimMode;
  ttlMs: number;
}

/** How long `auto` keeps claiming after the last sign of another delivering process. */
const CONTENTION_WINDOW_MS = 60_000;

export class Claimer {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #origin: string;
  readonly #settings: ClaimSettings;
  readonly #logger: Logger;
  #contendedUntil = Number.NEGATIVE_INFINITY;

  constructor(io: NatsIo, layout: Layout, origin: string, settings: ClaimSettings, logger: Logger) {
    this.#io = io;
    this.#layout = layout;
    this.#origin = origin;
    this.#settings = settings;
    this.#logger = logger;
  }

  get ttlMs(): number {
    return this.#settings.ttlMs;
  }

  /** Whether deliveries claim now. */
  get active(): boolean {
    if (this.#settings.mode === 'always') return true;
    if (this.#settings.mode === 'off') return false;
    return performance.now() < this.#contendedUntil;
  }

  /** Another process delivers from the same store: claim for a while (mode `auto`). */
  noteContention(): void {
    this.#contendedUntil = performance.now() + CONTENTION_WINDOW_MS;
  }

  #headers(expected: number): Record<string, string> {
    return {
      'Nats-TTL': `${Math.max(1, Math.ceil(this.#settings.ttlMs / 1000))}s`,
      'Nats-Expected-Last-Subject-Sequence': String(expected),
    };
  }

  #body(found: Found): string {
    return JSON.stringify({ o: this.#origin, r: found.seq });
  }

  /**
   * Claims `found`, all at once: returns what this process got (each with its marker's sequence in
   * `claimSeq`) and what another process holds.
   */
  async claim(found: readonly Found[]): Promise<{ mine: Found[]; theirs: Found[] }> {
    const results = await Promise.all(found.map((f) => this.#claimOne(f)));
    const mine: Found[] = [];
    const theirs: Found[] = [];
    found.forEach((f, i) => {
      const seq = results[i];
      if (seq === undefined) theirs.push(f);
      else mine.push(Object.assign(f, { claimSeq: seq }));
    });
    if (theirs.length > 0) this.noteContention();
    return { mine, theirs };
  }

  async #claimOne(f: Found): Promise<number | undefined> {
    const subject = this.#layout.claim(f.schedule.key);
    for (let attempt = 0; attempt < 3; attempt++) {
      let expected = 0;
      if (attempt > 0) {
        const held = await this.#io.last(this.#layout.storeStream, subject);
        if (held) {
          let marker: { o?: unknown; r?: unknown } = {};
          try {
            marker = held.json();
          } catch {
            marker = {};
          }
          // A live claim of another process on this very record: theirs.
          if (marker.r === f.seq && marker.o !== this.#origin) return undefined;
          expected = held.seq;
        }
      }
      const result = await this.#io.publish(subject, this.#body(f), { headers: this.#headers(expected) });
      if (result !== 'conflict') return result.seq;
    }
    return undefined;
  }

  /** Renews the markers of `claims` (those with a `claimSeq`) every third of the TTL; returns a stop. */
  renew(claims: readonly Found[]): () => void {
    const mine = claims.filter((f) => f.claimSeq !== undefined);
    if (mine.length === 0) return () => {};
    const timer = setInterval(
      () => {
        void Promise.all(
          mine.map(async (f) => {
            if (f.claimSeq === undefined) return;
            const result = await this.#io
              .publish(this.#layout.claim(f.schedule.key), this.#body(f), {
                headers: this.#headers(f.claimSeq),
              })
              .catch(() => 'conflict' as const);
            // Lost (expired and taken): the commit's compare-and-set still decides.
            f.claimSeq = result === 'conflict' ? undefined : result.seq;
          }),
        );
      },
      Math.max(250, Math.floor(this.#settings.ttlMs / 3)),
    );
    timer.unref?.();
    return () => clearInterval(timer);
  }

  /** Removes the markers of claims given back unconsumed, so other processes may take them at once. */
  async release(claims: readonly Found[]): Promise<void> {
    await Promise.all(
      claims.map(async (f) => {
        if (f.claimSeq === undefined) return;
        const expected = f.claimSeq;
        f.claimSeq = undefined;
        await this.#io
          .publish(this.#layout.claim(f.schedule.key), '', {
            headers: {
              'Nats-Rollup': 'sub',
              'Nats-TTL': '1s',
              'Nats-Expected-Last-Subject-Sequence': String(expected),
            },
          })
          .catch((error: unknown) =>
            this.#logger.warn('nats store: giving back a delivery claim failed; it expires by itself', {
              error,
            }),
          );
      }),
    );
  }
}
