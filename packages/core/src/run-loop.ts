import type { Clock } from './clock.js';
import { ClosedError } from './errors.js';

/** Where a long-running component stands. */
export type RunState = 'idle' | 'running' | 'draining' | 'stopped';

/**
 * The lifecycle the Dispatcher and the Scheduler share: `run()` once, drain on an abort signal or on
 * request, and between passes sleep on a clock until a deadline or a wake-up, whichever comes first.
 * The component's loop owns what it does in a pass; this owns when passes happen and when they stop.
 */
export class RunLoop {
  state: RunState = 'idle';
  /** When the current sleep ends (infinity while awake). */
  armedAt = Number.POSITIVE_INFINITY;
  readonly #what: string;
  readonly #clock: Clock;
  #done: Promise<void> | undefined;
  #wakeUp: (() => void) | undefined;
  /** Moves the current sleep's end earlier (set while asleep). */
  #rearm: ((at: number) => void) | undefined;
  #woken = false;
  /** The latest instant the next sleep may end, from {@link lookBy} calls made while awake. */
  #lookBy = Number.POSITIVE_INFINITY;

  constructor(what: string, clock: Clock) {
    this.#what = what;
    this.#clock = clock;
  }

  /**
   * Runs `body` once; when `signal` aborts, calls `onAbort` (the component's drain). The listener is
   * removed when the body ends, since the signal may outlive the component (one shutdown signal for a
   * whole application).
   *
   * @throws {ClosedError} on a second call.
   */
  start(body: () => Promise<void>, signal: AbortSignal | undefined, onAbort: () => void): Promise<void> {
    if (this.state !== 'idle')
      throw new ClosedError(`${this.#what} (it is ${this.state}; run() may be called once)`);
    this.state = 'running';
    let detach: (() => void) | undefined;
    if (signal) {
      if (signal.aborted) this.state = 'draining';
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        detach = () => signal.removeEventListener('abort', onAbort);
      }
    }
    this.#done = body().finally(() => {
      detach?.();
      this.state = 'stopped';
    });
    return this.#done;
  }

  /** Resolves when the body has ended (at once when it never started). */
  get done(): Promise<void> {
    return this.#done ?? Promise.resolve();
  }

  get running(): boolean {
    return this.state === 'running';
  }

  /** Ends the current sleep, or makes the next one return at once. */
  wake(): void {
    this.#woken = true;
    this.#wakeUp?.();
  }

  /**
   * Makes the loop look again by `at` at the latest: at once when `at` has come; while asleep, the sleep
   * ends at `at` if it would end later; while awake (a pass under way), the next sleep ends by `at`. A pass
   * decides how long to sleep from what it read, so a deadline reported while it runs (one it may have
   * read, or not) bounds the sleep after it instead of starting another pass at once.
   */
  lookBy(at: number): void {
    if (at <= this.#clock.now()) this.wake();
    else if (this.#rearm) {
      if (at < this.armedAt) this.#rearm(at);
    } else if (at < this.#lookBy) this.#lookBy = at;
  }

  /** Whether a wake-up arrived since the last call, clearing it. */
  takeWake(): boolean {
    const woken = this.#woken;
    this.#woken = false;
    return woken;
  }

  /**
   * Sleeps `ms` on the clock, or until a wake-up or a drain. Resolves true when the whole time elapsed
   * (the deadline the caller slept for has come), false when woken earlier.
   */
  sleep(ms: number): Promise<boolean> {
    const now = this.#clock.now();
    const lookBy = this.#lookBy;
    this.#lookBy = Number.POSITIVE_INFINITY;
    const until = Math.min(now + ms, lookBy);
    if (until <= now || this.#woken || this.state !== 'running') return Promise.resolve(false);
    this.armedAt = until;
    return new Promise<boolean>((resolve) => {
      let cancel = () => {};
      const finish = (elapsed: boolean) => {
        cancel();
        this.#wakeUp = undefined;
        this.#rearm = undefined;
        this.armedAt = Number.POSITIVE_INFINITY;
        resolve(elapsed);
      };
      cancel = this.#clock.setTimer(until - now, () => finish(true));
      this.#wakeUp = () => finish(false);
      this.#rearm = (at) => {
        cancel();
        this.armedAt = at;
        cancel = this.#clock.setTimer(at - this.#clock.now(), () => finish(true));
      };
    });
  }

  /** Moves to draining (a no-op when already stopping) and waits for the body to end. */
  async drain(): Promise<void> {
    if (this.state === 'idle') {
      this.state = 'stopped';
      return;
    }
    if (this.state === 'running') this.state = 'draining';
    this.#wakeUp?.();
    await this.#done;
  }
}
