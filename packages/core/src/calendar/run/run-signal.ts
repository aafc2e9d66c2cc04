import type { Clock } from '../../clock.js';
import { DuetimeError, type DuetimeErrorCode } from '../../errors.js';
import { Reason } from '../decide/records.js';
import type { AbortFanout } from '../decide/slots.js';

/** Why a run's signal was aborted; `reason` is the record's reason. */
export class RunAbortedError extends DuetimeError {
  readonly reason: Reason;

  constructor(reason: Reason, message: string) {
    super(codeFor(reason), message);
    this.reason = reason;
  }
}

function codeFor(reason: Reason): DuetimeErrorCode {
  if (reason === Reason.TimedOut) return 'DUETIME_TIMEOUT';
  if (reason === Reason.Stopped) return 'DUETIME_CLOSED';
  return 'DUETIME_LEADERSHIP_LOST';
}

/** What can end a run early. */
export interface RunSignalSources {
  /** Aborted when running handlers must stop (`stopped`). */
  stop: AbortSignal;
  /** Aborted when the leadership the run was admitted under is lost (`leadership_lost`); none for manual runs. */
  epoch?: AbortSignal | undefined;
  /** Aborted when the run's overlap lease is lost (`overlap_lost`). */
  overlap?: AbortSignal | undefined;
  /** The declaration's `timeout` in ms (`timed_out`). */
  timeout?: number | undefined;
}

/**
 * The signal a handler runs under: aborted once, with a {@link RunAbortedError}, by whichever comes first
 * of a stop, the loss of leadership or of the overlap lease, and the timeout.
 */
export class RunSignal {
  readonly #controller = new AbortController();
  readonly #cleanups: (() => void)[] = [];

  constructor(fanout: AbortFanout, clock: Clock, sources: RunSignalSources) {
    const listen = (signal: AbortSignal | undefined, reason: Reason, message: string) => {
      if (signal) this.#cleanups.push(fanout.subscribe(signal, () => this.#abort(reason, message)));
    };
    listen(sources.stop, Reason.Stopped, 'the scheduler stopped');
    listen(sources.epoch, Reason.LeadershipLost, 'leadership of the group was lost');
    listen(sources.overlap, Reason.OverlapLost, 'the overlap lease was lost');
    const timeout = sources.timeout;
    if (timeout !== undefined)
      this.#cleanups.push(
        clock.setTimer(timeout, () => this.#abort(Reason.TimedOut, `timed out after ${timeout} ms`)),
      );
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Calls `fn` with the abort reason when the signal aborts (at once when it already has). */
  onAbort(fn: (reason: RunAbortedError) => void): void {
    const signal = this.#controller.signal;
    const call = () => fn(signal.reason as RunAbortedError);
    if (signal.aborted) call();
    else signal.addEventListener('abort', call, { once: true });
  }

  /** Stops listening to the sources and cancels the timeout. */
  dispose(): void {
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
  }

  #abort(reason: Reason, message: string): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(new RunAbortedError(reason, message));
  }
}
