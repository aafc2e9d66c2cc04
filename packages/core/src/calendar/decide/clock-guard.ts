import type { Clock } from '../../clock.js';
import { describeError } from './records.js';

/** Clock readings further back than this are reported (smaller steps are only absorbed). */
export const CLOCK_BACKWARDS_TOLERANCE_MS = 1000;

/**
 * The scheduler's time: the clock's reading, held at its high-water mark so that a clock set back never
 * re-admits occurrences. A reading that goes back by more than a second, or a clock that throws or
 * returns something that is not a finite number, is reported once per incident through `onIncident`.
 */
export class ClockGuard {
  readonly #clock: Clock;
  readonly #onIncident: (detail: string, at: number) => void;
  #highWater = Number.NEGATIVE_INFINITY;
  #behind = false;

  constructor(clock: Clock, onIncident: (detail: string, at: number) => void) {
    this.#clock = clock;
    this.#onIncident = onIncident;
  }

  /** The highest reading so far (negative infinity before the first). */
  get highWater(): number {
    return this.#highWater;
  }

  /** The time to act on, or `undefined` when the clock failed. */
  read(): number | undefined {
    let raw: number;
    try {
      raw = this.#clock.now();
      if (!Number.isFinite(raw)) throw new Error(`the clock returned ${raw}`);
    } catch (error) {
      this.#onIncident(
        `the clock failed: ${describeError(error)}`,
        Number.isFinite(this.#highWater) ? this.#highWater : 0,
      );
      return undefined;
    }
    if (raw < this.#highWater) {
      if (!this.#behind && this.#highWater - raw > CLOCK_BACKWARDS_TOLERANCE_MS) {
        this.#behind = true;
        this.#onIncident(
          `the clock ran backwards from ${new Date(this.#highWater).toISOString()} to ${new Date(raw).toISOString()}; holding time until it catches up`,
          this.#highWater,
        );
      }
      return this.#highWater;
    }
    this.#behind = false;
    this.#highWater = raw;
    return raw;
  }
}
