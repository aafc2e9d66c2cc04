import type { CursorBackend } from '../../lease/types.js';
import type { Logger } from '../../logger.js';
import type { Declaration } from '../declare/declarations.js';
import type { Timeline } from './admission.js';
import type { HeapItem } from './heap.js';

/**
 * Per schedule: what was decided in this epoch and how far the durable cursor may move.
 *
 * The cursor is the latest occurrence completed or deliberately skipped, and it only moves past an
 * instant once everything admitted before that instant has finished: an occurrence still running (or
 * cancelled) is never jumped over, so a crash or failover re-examines it.
 */
export interface Track extends HeapItem {
  readonly declaration: Declaration;
  readonly timeline: Timeline;
  readonly cursorKey: string;
  /** Runs in this environment (its `environments` include the scheduler's). */
  readonly active: boolean;
  /** The leadership token this state belongs to; reset when a new epoch starts. */
  epoch: number | undefined;
  /** Whether the durable cursor was read in this epoch. */
  loaded: boolean;
  /** Every occurrence at or before this instant has been decided in this epoch (or before it). */
  decidedThrough: number | undefined;
  /** Admitted instants not finished yet, ascending. */
  inFlight: number[];
  /**
   * Earliest instant cancelled in this epoch (stopped, leadership or overlap lost): the cursor stays
   * before it until the epoch ends, so the next leader re-examines it. Undefined when none.
   */
  held: number | undefined;
  /** Finished instants that move the cursor, ascending, not yet covered by `target`. */
  settled: number[];
  /** Where the cursor should be (persisted or about to be). */
  target: number | undefined;
  /** The last value the backend confirmed (or read). */
  persisted: number | undefined;
  writing: boolean;
  /** Handlers of this schedule whose records are still running. */
  running: number;
}

export function newTrack(
  declaration: Declaration,
  timeline: Timeline,
  cursorKey: string,
  active: boolean,
): Track {
  return {
    declaration,
    timeline,
    cursorKey,
    active,
    epoch: undefined,
    loaded: false,
    decidedThrough: undefined,
    inFlight: [],
    held: undefined,
    settled: [],
    target: undefined,
    persisted: undefined,
    writing: false,
    running: 0,
    due: Number.NaN,
    heapIndex: -1,
  };
}

/** Forgets the epoch-local state (a new leadership re-reads the durable cursor). */
export function resetTrack(track: Track, epoch: number): void {
  track.epoch = epoch;
  track.loaded = false;
  track.decidedThrough = undefined;
  track.inFlight = [];
  track.held = undefined;
  track.settled = [];
}

function insertSorted(list: number[], value: number): void {
  let i = list.length;
  while (i > 0 && (list[i - 1] as number) > value) i--;
  list.splice(i, 0, value);
}

/** Moves and persists cursors. */
export class CursorBook {
  readonly #cursors: CursorBackend | undefined;
  readonly #ttl: number;
  readonly #logger: Logger;
  readonly #dirty = new Set<Track>();
  readonly #writes = new Set<Promise<void>>();

  constructor(cursors: CursorBackend | undefined, ttl: number, logger: Logger) {
    this.#cursors = cursors;
    this.#ttl = ttl;
    this.#logger = logger;
  }

  /** Reads the durable cursor into the track (once per epoch). */
  async load(track: Track): Promise<void> {
    const stored = this.#cursors ? await this.#cursors.read(track.cursorKey) : undefined;
    const storedMs = stored?.getTime();
    if (storedMs !== undefined) track.persisted = Math.max(track.persisted ?? storedMs, storedMs);
    // What this process finished itself counts too, even if its cursor write has not landed yet.
    const known = Math.max(
      track.persisted ?? Number.NEGATIVE_INFINITY,
      track.target ?? Number.NEGATIVE_INFINITY,
    );
    if (Number.isFinite(known)) {
      if (track.target === undefined || track.target < known) track.target = known;
      track.decidedThrough = Math.max(track.decidedThrough ?? known, known);
    }
    track.loaded = true;
  }

  admitted(track: Track, at: number): void {
    insertSorted(track.inFlight, at);
  }

  /**
   * Records that the occurrence at `at` finished. `advances` is false for cancelled runs: nothing in this
   * epoch runs them again, so they hold the cursor back until the epoch ends, whatever finishes after
   * them. (Letting go of them would let a later occurrence that still finished carry the cursor past
   * them, and the next leader would never run them.)
   */
  finished(track: Track, at: number, advances: boolean): void {
    const i = track.inFlight.indexOf(at);
    if (i >= 0) track.inFlight.splice(i, 1);
    if (advances) insertSorted(track.settled, at);
    else if (track.held === undefined || at < track.held) track.held = at;
    this.#advance(track);
  }

  /** Records a decision that ran nothing (missed, backlog) at `at`. */
  skipped(track: Track, at: number): void {
    insertSorted(track.settled, at);
    this.#advance(track);
  }

  #advance(track: Track): void {
    const blocker = Math.min(
      track.inFlight[0] ?? Number.POSITIVE_INFINITY,
      track.held ?? Number.POSITIVE_INFINITY,
    );
    let target = track.target;
    while (track.settled.length > 0 && (track.settled[0] as number) < blocker) {
      const at = track.settled.shift() as number;
      if (target === undefined || at > target) target = at;
    }
    if (target === undefined || (track.target !== undefined && target <= track.target)) return;
    track.target = target;
    this.#dirty.add(track);
    this.flush();
  }

  /** Writes every cursor that moved. A failed write is retried by {@link retry} (every tick), not at once. */
  flush(): void {
    for (const track of [...this.#dirty]) {
      if (track.writing) continue;
      this.#dirty.delete(track);
      const target = track.target as number;
      if (!this.#cursors) {
        track.persisted = target;
        continue;
      }
      track.writing = true;
      let failed = false;
      const write = this.#cursors
        .advance(track.cursorKey, new Date(target), this.#ttl)
        .then(
          (stored) => {
            track.persisted = Math.max(track.persisted ?? stored.getTime(), stored.getTime());
          },
          (error: unknown) => {
            failed = true;
            this.#failed.add(track);
            this.#logger.warn('could not advance a schedule cursor; will retry', {
              schedule: track.declaration.id,
              error,
            });
          },
        )
        .finally(() => {
          track.writing = false;
          this.#writes.delete(write);
          const behind =
            track.target !== undefined && (track.persisted === undefined || track.target > track.persisted);
          if (behind && !failed) {
            this.#dirty.add(track);
            this.flush();
          }
        });
      this.#writes.add(write);
    }
  }

  readonly #failed = new Set<Track>();

  /** Tries the failed writes again (called every tick). */
  retry(): void {
    for (const track of this.#failed) this.#dirty.add(track);
    this.#failed.clear();
    this.flush();
  }

  /** Waits for the writes in flight. */
  async settle(): Promise<void> {
    while (this.#writes.size > 0) await Promise.allSettled([...this.#writes]);
  }
}
