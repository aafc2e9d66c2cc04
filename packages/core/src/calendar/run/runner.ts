import { describeError, Reason, type ScheduleRecord, State } from '../decide/records.js';
import type { Declaration } from '../declare/declarations.js';
import { type HandlerContext, withInvocation } from './invocation.js';
import { Holdings, RunGuards } from './run-guards.js';
import { RunSignal } from './run-signal.js';
import type { ActiveRun, RunnerDependencies, RunRequest } from './run-types.js';

export { RunAbortedError } from './run-signal.js';

/**
 * Runs one occurrence: the guards before it (see `run-guards.ts`), the hooks and the handler under a
 * signal, and the record of how it ended. A handler that throws, rejects or never settles only ever
 * affects its own record.
 */

class HookFailure {
  constructor(readonly error: unknown) {}
}
class Panic {
  constructor(readonly error: unknown) {}
}

/** The record's reason and error for a failure of the hooks or the handler. */
function failureOf(failure: unknown): [Reason, unknown] {
  if (failure instanceof HookFailure) return [Reason.HookFailed, failure.error];
  if (failure instanceof Panic) return [Reason.Panicked, failure.error];
  return [Reason.HandlerFailed, failure];
}

/** A run decided before it started: nothing to wait for. */
function decided(record: ScheduleRecord): ActiveRun {
  return {
    record,
    finished: Promise.resolve(record),
    settled: Promise.resolve(),
    abandon() {},
  };
}

/** Runs occurrences for one scheduler. */
export class Runner {
  readonly #deps: RunnerDependencies;
  readonly #guards: RunGuards;

  constructor(deps: RunnerDependencies) {
    this.#deps = deps;
    this.#guards = new RunGuards(deps, (request, state, reason, extra) =>
      this.skip(request, state, reason, extra),
    );
  }

  /** Occurrences waiting for their schedule's previous run to end (`onOverlap: 'queue'`). */
  get queued(): number {
    return this.#guards.queued;
  }

  /** Records a decision that ran nothing (skipped, or cancelled before starting). */
  skip(
    request: RunRequest,
    state: typeof State.Skipped | typeof State.Cancelled | typeof State.Failed,
    reason: Reason,
    extra: Partial<ScheduleRecord> = {},
  ): ScheduleRecord {
    const now = new Date(this.#deps.clock.now());
    return this.#deps.history.add({
      schedule: request.invocation.schedule,
      occurrence: request.invocation.occurrence,
      intendedAt: request.invocation.intendedAt,
      origin: request.invocation.origin,
      state,
      reason,
      ...(request.epoch !== undefined ? { epoch: request.epoch } : {}),
      finishedAt: now,
      ...extra,
    });
  }

  /**
   * Runs the guards, then the handler. Resolves with the run once it has started or been decided. What
   * the guards took is released here when the run is decided before it starts, and by the run itself
   * otherwise (the slot when its record is final, the overlap lease when its handler has settled).
   */
  async start(request: RunRequest): Promise<ActiveRun> {
    const id = request.declaration.id;
    const held = new Holdings(this.#deps.slots, this.#deps.logger, id, () =>
      this.#guards.overlapReleased(id),
    );
    let refusal: ScheduleRecord | undefined;
    try {
      for (const guard of this.#guards.pipeline(request)) {
        const verdict = guard(request, held);
        refusal = verdict instanceof Promise ? await verdict : verdict;
        if (refusal) break;
      }
    } catch (error) {
      await held.releaseAll();
      throw error;
    }
    if (refusal) {
      await held.releaseAll();
      return decided(refusal);
    }
    return this.#execute(request, held);
  }

  #execute(request: RunRequest, held: Holdings): ActiveRun {
    const deps = this.#deps;
    const { declaration, invocation } = request;
    const record = deps.history.add({
      schedule: invocation.schedule,
      occurrence: invocation.occurrence,
      intendedAt: invocation.intendedAt,
      origin: invocation.origin,
      state: State.Running,
      ...(request.epoch !== undefined ? { epoch: request.epoch } : {}),
      startedAt: new Date(deps.clock.now()),
    });
    const control = new RunSignal(deps.fanout, deps.clock, {
      stop: deps.stopSignal,
      epoch: request.epochSignal,
      overlap: held.overlap?.signal,
      timeout: declaration.options.timeout,
    });
    const context: HandlerContext = Object.freeze({ signal: control.signal, invocation });
    const run = () => withInvocation(invocation, () => this.#work(declaration, context));
    const work = deps.around ? deps.around(record, run) : run();
    const { conclude, finished } = this.#concluder(request, record, context, control, held);
    control.onAbort((aborted) => {
      const state = aborted.reason === Reason.TimedOut ? State.Failed : State.Cancelled;
      void conclude(state, aborted.reason, state === State.Failed ? aborted : undefined);
    });
    const settled = work.then(
      () => conclude(State.Succeeded),
      (failure: unknown) => conclude(State.Failed, ...failureOf(failure)),
    );
    return {
      record,
      finished,
      settled: settled.then(() => held.releaseOverlap()),
      abandon: () => held.abandonOverlap(),
    };
  }

  /**
   * How a started run ends, once: the record is finished, the signal's sources let go, the slot freed,
   * then the `failed` hook runs, then `finished` resolves.
   */
  #concluder(
    request: RunRequest,
    record: ScheduleRecord,
    context: HandlerContext,
    control: RunSignal,
    held: Holdings,
  ): {
    conclude: (
      state: 'succeeded' | 'failed' | 'cancelled',
      reason?: Reason,
      error?: unknown,
    ) => Promise<void>;
    finished: Promise<ScheduleRecord>;
  } {
    const deps = this.#deps;
    const { declaration, invocation } = request;
    let finish!: (record: ScheduleRecord) => void;
    const finished = new Promise<ScheduleRecord>((resolve) => {
      finish = resolve;
    });
    let final = false;
    const conclude = async (
      state: 'succeeded' | 'failed' | 'cancelled',
      reason?: Reason,
      error?: unknown,
    ): Promise<void> => {
      if (final) return;
      final = true;
      control.dispose();
      deps.history.finish(record, {
        state,
        ...(reason ? { reason } : {}),
        ...(error !== undefined ? { error: describeError(error) } : {}),
        finishedAt: new Date(deps.clock.now()),
      });
      held.releaseSlot();
      const failed = declaration.options.failed;
      if (state === State.Failed && failed) {
        try {
          await withInvocation(invocation, () => failed(context, error));
        } catch (hookError) {
          deps.logger.error('failed hook threw', { schedule: declaration.id, error: hookError });
        }
      }
      finish(record);
    };
    return { conclude, finished };
  }

  /** before → handler → after; failures are tagged by where they happened. */
  async #work(declaration: Declaration, context: HandlerContext): Promise<void> {
    const { before, after } = declaration.options;
    if (before) {
      try {
        await before(context);
      } catch (error) {
        throw new HookFailure(error);
      }
    }
    let result: unknown;
    try {
      result = declaration.handler(context);
    } catch (error) {
      throw new Panic(error);
    }
    try {
      await result;
    } catch (error) {
      if (!(error instanceof Error)) throw new Panic(error);
      throw error;
    }
    if (after) {
      try {
        await after(context);
      } catch (error) {
        throw new HookFailure(error);
      }
    }
  }
}
