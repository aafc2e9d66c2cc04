import type { Clock } from '../../clock.js';
import type { AbortFanout } from './slots.js';

interface Place {
  /** Ends the current wait early (a local run let go of the lease, or a signal aborted). */
  wakeUp: (() => void) | undefined;
  /** A wake-up that came while nobody was sleeping: the next wait returns at once. */
  pending: boolean;
}

/**
 * The one place per schedule where an occurrence of a `withoutOverlap` declaration with
 * `onOverlap: 'queue'` waits for the overlap lease while the previous run holds it. The wait ends when a
 * run of the schedule in this process releases the lease ({@link wake}), after `retryMs` (for a holder in
 * another process, or a crashed holder's lease expiring), or when a signal aborts.
 */
export class OverlapQueue {
  readonly #places = new Map<string, Place>();
  readonly #clock: Clock;
  readonly #fanout: AbortFanout;
  readonly #retryMs: number;

  constructor(clock: Clock, fanout: AbortFanout, retryMs: number) {
    this.#clock = clock;
    this.#fanout = fanout;
    this.#retryMs = retryMs;
  }

  /** Occurrences waiting now, all schedules together. */
  get size(): number {
    return this.#places.size;
  }

  /** Whether an occurrence of `schedule` waits in its place now. */
  waiting(schedule: string): boolean {
    return this.#places.has(schedule);
  }

  /** Takes the schedule's place; false when another occurrence of it already waits. */
  join(schedule: string): boolean {
    if (this.#places.has(schedule)) return false;
    this.#places.set(schedule, { wakeUp: undefined, pending: false });
    return true;
  }

  /** Gives the place up (the occurrence got the lease or was decided). */
  leave(schedule: string): void {
    this.#places.get(schedule)?.wakeUp?.();
    this.#places.delete(schedule);
  }

  /** A run of `schedule` let go of its overlap lease: the waiting occurrence tries again now. */
  wake(schedule: string): void {
    const place = this.#places.get(schedule);
    if (!place) return;
    if (place.wakeUp) place.wakeUp();
    else place.pending = true;
  }

  /** Waits in the schedule's place until woken, `retryMs` elapse or a signal aborts. */
  wait(schedule: string, signals: readonly (AbortSignal | undefined)[]): Promise<void> {
    const place = this.#places.get(schedule);
    if (!place || place.pending || signals.some((s) => s?.aborted)) {
      if (place) place.pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const stops: (() => void)[] = [];
      const done = () => {
        for (const stop of stops.splice(0)) stop();
        place.wakeUp = undefined;
        resolve();
      };
      place.wakeUp = done;
      stops.push(this.#clock.setTimer(this.#retryMs, done));
      for (const signal of signals) if (signal) stops.push(this.#fanout.subscribe(signal, done));
    });
  }
}
