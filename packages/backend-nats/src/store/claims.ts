import type { Logger } from '@duetime/core';
import type { NatsIo } from '../io.js';
import type { Layout } from '../layout.js';
import type { Found } from './due.js';

/**
 * Delivery claims across processes: before a delivery runs a schedule, it writes a claim marker for the
 * schedule's key (`c.<key>`, naming the record sequence it claims) with `Nats-Expected-Last-Subject-
 * Sequence: 0` (no live claim there) and a per-message TTL (`Nats-TTL`), so one process at a time runs it;
 * others skip it until the marker is released or lapses. Markers are renewed while their delivery is
 * open (core calls `renew`) and removed when it gives a schedule back. A marker for an older record (the
 * schedule was replaced, or consumed and scheduled again) does not hold the new one.
 *
 * A marker lapses {@link ClaimSettings.ttlMs} after its last write (judged on the server's clock), but the
 * server keeps it for {@link LAPSED_MEMORY_S} more: a claim that is met lapsed on the very record it
 * claimed was never settled (its process died), and the schedule is claimed again as `interrupted`.
 *
 * Claims save duplicate work and count crashes; they are not what keeps effects single: every
 * consumption is a compare-and-set on the schedule's record at commit, claimed or not. A settled
 * schedule's marker is marked settled by the commit's own batch. Modes:
 * - `auto` (default) and `always`: claim every delivery (the backend declares `exclusiveClaims`). With
 *   `auto`, once other processes are seen delivering from the same store (for a minute after the last
 *   sighting; always with `always`), each process drains a due second of its own, so they rarely meet
 *   (see DueIndex.due).
 * - `off`: no markers (and no crash counting: a delivery whose process died is delivered again as if
 *   it had never started).
 */
export type ClaimMode = 'auto' | 'always' | 'off';

export interface ClaimSettings {
  mode: ClaimMode;
  ttlMs: number;
}

/** How long the server keeps a lapsed marker, in seconds (to tell an interrupted claim). */
const LAPSED_MEMORY_S = 600;

/**
 * How long the server keeps the marker of a settled claim (`{ d: <record sequence> }`, written by the
 * commit's batch): a process that read the due index before the commit and claims the consumed record
 * afterwards finds it settled, instead of running it again.
 */
const SETTLED_TTL = '60s';

/** The marker of a settled claim on the record at `seq` (see {@link SETTLED_TTL}). */
export function settledMarker(seq: number): { data: string; headers: Record<string, string> } {
  return { data: JSON.stringify({ d: seq }), headers: { 'Nats-Rollup': 'sub', 'Nats-TTL': SETTLED_TTL } };
}

/** How long `auto` keeps claiming after the last sign of another delivering process. */
const CONTENTION_WINDOW_MS = 60_000;

export class Claimer {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #origin: string;
  readonly #settings: ClaimSettings;
  readonly #logger: Logger;
  /** The server's time (a lower bound), in ms since the epoch. */
  readonly #now: () => Promise<number>;
  #contendedUntil = Number.NEGATIVE_INFINITY;

  constructor(
    io: NatsIo,
    layout: Layout,
    origin: string,
    settings: ClaimSettings,
    logger: Logger,
    now: () => Promise<number>,
  ) {
    this.#io = io;
    this.#layout = layout;
    this.#origin = origin;
    this.#settings = settings;
    this.#logger = logger;
    this.#now = now;
  }

  get ttlMs(): number {
    return this.#settings.ttlMs;
  }

  /** Whether deliveries claim. */
  get active(): boolean {
    return this.#settings.mode !== 'off';
  }

  /** Whether other processes deliver from the same store (spread the reads of the due index). */
  get contended(): boolean {
    return this.#settings.mode === 'always' || performance.now() < this.#contendedUntil;
  }

  /** Another process delivers from the same store: claim for a while (mode `auto`). */
  noteContention(): void {
    this.#contendedUntil = performance.now() + CONTENTION_WINDOW_MS;
  }

  #headers(expected: number): Record<string, string> {
    return {
      'Nats-Rollup': 'sub',
      'Nats-TTL': `${Math.max(1, Math.ceil(this.#settings.ttlMs / 1000)) + LAPSED_MEMORY_S}s`,
      'Nats-Expected-Last-Subject-Sequence': String(expected),
    };
  }

  #body(found: Found): string {
    return JSON.stringify({ o: this.#origin, r: found.seq });
  }

  /**
   * Claims `found`, all at once: returns what this process got (each with its marker's sequence in
   * `claimSeq`, and `interrupted` when an unsettled claim of the same record lapsed) and what another
   * process holds.
   */
  async claim(found: readonly Found[]): Promise<{ mine: Found[]; theirs: Found[] }> {
    const results = await Promise.all(found.map((f) => this.#claimOne(f)));
    const mine: Found[] = [];
    const theirs: Found[] = [];
    found.forEach((f, i) => {
      const result = results[i];
      if (result === undefined) theirs.push(f);
      else mine.push(Object.assign(f, { claimSeq: result.seq, interrupted: result.interrupted }));
    });
    if (theirs.length > 0) this.noteContention();
    return { mine, theirs };
  }

  async #claimOne(f: Found): Promise<{ seq: number; interrupted: boolean } | undefined> {
    const subject = this.#layout.claim(f.schedule.key);
    for (let attempt = 0; attempt < 3; attempt++) {
      let expected = 0;
      let interrupted = false;
      if (attempt > 0) {
        const held = await this.#io.last(this.#layout.storeStream, subject);
        if (held) {
          expected = held.seq;
          let marker: { o?: unknown; r?: unknown; d?: unknown } = {};
          try {
            marker = held.data.length > 0 ? held.json() : {};
          } catch {
            marker = {};
          }
          // Settled meanwhile (consumed, or retried as a new record): not to run again.
          if (marker.d === f.seq) return undefined;
          if (marker.r === f.seq) {
            const lapsed = held.time + this.#settings.ttlMs <= (await this.#now());
            // A live claim of another process on this very record: theirs.
            if (!lapsed && marker.o !== this.#origin) return undefined;
            // Claimed and never settled nor given back: its process died holding it.
            if (lapsed) interrupted = true;
          }
        }
      }
      const result = await this.#io.publish(subject, this.#body(f), { headers: this.#headers(expected) });
      if (result !== 'conflict') return { seq: result.seq, interrupted };
    }
    return undefined;
  }

  /** Renews the markers of `claims` (those with a `claimSeq`); a marker lost meanwhile is let go. */
  async renew(claims: readonly Found[]): Promise<void> {
    await Promise.all(
      claims.map(async (f) => {
        if (f.claimSeq === undefined) return;
        const result = await this.#io
          .publish(this.#layout.claim(f.schedule.key), this.#body(f), {
            headers: this.#headers(f.claimSeq),
          })
          .catch(() => 'conflict' as const);
        // Lost (lapsed and taken): the commit's compare-and-set still decides.
        f.claimSeq = result === 'conflict' ? undefined : result.seq;
      }),
    );
  }

  /** Removes the markers of `claims`, so other processes may take them at once. */
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
            this.#logger.warn('nats store: giving back a delivery claim failed; it lapses by itself', {
              error,
            }),
          );
      }),
    );
  }
}
