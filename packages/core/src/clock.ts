/**
 * Time as an input. Everything in duetime that reads the time or waits goes through a `Clock`, so tests
 * drive time with {@link ManualClock} instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Calls `fn` after `ms` milliseconds of this clock's time; returns a function that cancels it. */
  setTimer(ms: number, fn: () => void): () => void;
}

/**
 * The process's real clock (`Date.now()` and `setTimeout`). Its timers keep the process alive, so a running
 * dispatcher or scheduler does too; stopping them clears their timers.
 */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const handle = setTimeout(fn, Math.max(0, Math.min(ms, 2_147_483_647)));
    return () => clearTimeout(handle);
  },
};

/**
 * Resolves after `ms` of `clock` time, or as soon as `signal` aborts (it never rejects). Returns true
 * when the full time elapsed.
 */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      cancel();
      resolve(false);
    };
    const cancel = clock.setTimer(ms, () => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    });
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

interface ManualTimer {
  id: number;
  at: number;
  fn: () => void;
}

/**
 * A clock that moves only when told to. `advance(ms)` runs every timer that falls due, in deadline order,
 * letting promise callbacks settle between timers, so code that sleeps on this clock runs as if the time
 * had passed. `set()` may move time backwards (to test clock jumps); timers never fire early.
 */
export class ManualClock implements Clock {
  #now: number;
  #timers: ManualTimer[] = [];
  #nextId = 1;

  constructor(start: Date | number = Date.UTC(2026, 0, 1)) {
    this.#now = typeof start === 'number' ? start : start.getTime();
  }

  now(): number {
    return this.#now;
  }

  setTimer(ms: number, fn: () => void): () => void {
    const timer: ManualTimer = { id: this.#nextId++, at: this.#now + Math.max(0, ms), fn };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Number of timers waiting. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, firing the timers that fall due on the way. */
  async advance(ms: number): Promise<void> {
    await this.advanceTo(this.#now + ms);
  }

  /** Moves time forward to `target`, firing the timers that fall due on the way. */
  async advanceTo(target: Date | number): Promise<void> {
    const end = typeof target === 'number' ? target : target.getTime();
    await settle();
    for (;;) {
      const next = this.#earliest();
      if (!next || next.at > end) break;
      this.#timers = this.#timers.filter((t) => t !== next);
      if (next.at > this.#now) this.#now = next.at;
      next.fn();
      await settle();
    }
    if (end > this.#now) this.#now = end;
    await settle();
  }

  /** Sets the time without firing timers on the way (a clock jump, forward or back). */
  set(time: Date | number): void {
    this.#now = typeof time === 'number' ? time : time.getTime();
  }

  #earliest(): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const t of this.#timers)
      if (!best || t.at < best.at || (t.at === best.at && t.id < best.id)) best = t;
    return best;
  }
}

/** Lets pending promise callbacks and immediate callbacks run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
