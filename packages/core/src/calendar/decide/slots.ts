import type { Clock } from '../../clock.js';

/**
 * Concurrency slots, and the shared abort listeners runs subscribe through. Both are shared by every
 * run of one scheduler.
 */

/**
 * One `abort` listener per shared signal, fanning out to many subscribers. Node's `addEventListener`
 * scans the listeners already there, so thousands of runs listening to the same stop or leadership
 * signal directly would cost quadratic time.
 */
export class AbortFanout {
  readonly #subscribers = new WeakMap<AbortSignal, Set<() => void>>();

  /** Calls `fn` once when `signal` aborts (at once if it already has); returns an unsubscribe function. */
  subscribe(signal: AbortSignal, fn: () => void): () => void {
    if (signal.aborted) {
      fn();
      return () => {};
    }
    let set = this.#subscribers.get(signal);
    if (!set) {
      const subscribers = new Set<() => void>();
      set = subscribers;
      this.#subscribers.set(signal, subscribers);
      signal.addEventListener(
        'abort',
        () => {
          const all = [...subscribers];
          subscribers.clear();
          for (const each of all) each();
        },
        { once: true },
      );
    }
    const subscribers = set;
    subscribers.add(fn);
    return () => subscribers.delete(fn);
  }
}

/** Concurrency slots with a bounded wait. */
export class Slots {
  readonly limit: number;
  #used = 0;
  readonly #waiters: { grant: () => void }[] = [];
  readonly #fanout: AbortFanout;

  constructor(limit: number, fanout = new AbortFanout()) {
    this.limit = limit;
    this.#fanout = fanout;
  }

  get used(): number {
    return this.#used;
  }

  get waiting(): number {
    return this.#waiters.length;
  }

  /** Takes a slot, waiting up to `waitMs` of `clock` time; false when none freed up or a signal aborted. */
  acquire(clock: Clock, waitMs: number, signals: readonly (AbortSignal | undefined)[]): Promise<boolean> {
    if (signals.some((s) => s?.aborted)) return Promise.resolve(false);
    if (this.#used < this.limit && this.#waiters.length === 0) {
      this.#used++;
      return Promise.resolve(true);
    }
    if (waitMs <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiter = {
        grant: () => {
          done();
          this.#used++;
          resolve(true);
        },
      };
      const giveUp = () => {
        done();
        resolve(false);
      };
      const cancelTimer = clock.setTimer(waitMs, giveUp);
      const unsubscribe: (() => void)[] = [];
      const done = () => {
        cancelTimer();
        for (const stop of unsubscribe) stop();
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
      };
      for (const signal of signals) if (signal) unsubscribe.push(this.#fanout.subscribe(signal, giveUp));
      this.#waiters.push(waiter);
    });
  }

  /** Takes a slot whatever the limit (manual runs). */
  force(): void {
    this.#used++;
  }

  release(): void {
    this.#used = Math.max(0, this.#used - 1);
    if (this.#used < this.limit) this.#waiters[0]?.grant();
  }
}
