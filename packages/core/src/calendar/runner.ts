import type { Clock } from '../clock.js';
import { DuetimeError, type DuetimeErrorCode } from '../errors.js';
import { LeaseManager } from '../lease/lease-manager.js';
import type { LeaseBackend } from '../lease/types.js';
import type { Logger } from '../logger.js';
import type { Declaration } from './declarations.js';
import { type HandlerContext, type Invocation, withInvocation } from './invocation.js';
import { describeError, type History, Reason, type ScheduleRecord, State } from './records.js';

/**
 * Runs one occurrence: the checks before it (maintenance, `when`, capacity, overlap lease), the hooks
 * and the handler under a signal, and the record of how it ended. A handler that throws, rejects or
 * never settles only ever affects its own record.
 */

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

/** What the runner needs from the scheduler. */
export interface RunnerDependencies {
  leases: LeaseBackend;
  clock: Clock;
  logger: Logger;
  history: History;
  slots: Slots;
  capacityWait: number;
  /** Lease key of the overlap lock of a schedule. */
  overlapKey(scheduleId: string): string;
  /** A fresh owner id for one overlap holding. */
  overlapOwner(): string;
  /** Whether the application is in maintenance mode now. */
  maintenance(): Promise<boolean>;
  /** Aborted when the scheduler starts draining: occurrences not started yet are cancelled (`stopped`). */
  admissionSignal: AbortSignal;
  /** Aborted when running handlers must stop (after the drain timeout, or at once on `stop()`). */
  stopSignal: AbortSignal;
  /** Shared listeners on the signals above and on leadership signals. */
  fanout: AbortFanout;
}

/** One occurrence to run. */
export interface RunRequest {
  declaration: Declaration;
  invocation: Invocation;
  /** Leadership fencing token; absent for manual runs. */
  epoch?: number;
  /** Aborted when the leadership this run was admitted under is lost; absent for manual runs. */
  epochSignal?: AbortSignal;
}

/** A run in progress, as the scheduler tracks it. */
export interface ActiveRun {
  readonly record: ScheduleRecord;
  /** Resolves when the record is final (succeeded, failed, cancelled or skipped). */
  readonly finished: Promise<ScheduleRecord>;
  /** Resolves when the handler (and hooks) actually settled, or at once when they never started. */
  readonly settled: Promise<void>;
  /** Stops renewing the overlap lease without releasing it (the process is leaving). */
  abandon(): void;
}

class HookFailure {
  constructor(readonly error: unknown) {}
}
class Panic {
  constructor(readonly error: unknown) {}
}

/** Runs occurrences for one scheduler. */
export class Runner {
  readonly #deps: RunnerDependencies;

  constructor(deps: RunnerDependencies) {
    this.#deps = deps;
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

  /** Runs the checks, then the handler. Resolves with the run once it has started or been decided. */
  async start(request: RunRequest): Promise<ActiveRun> {
    const deps = this.#deps;
    const { declaration, invocation } = request;
    const options = declaration.options;
    const manual = request.epochSignal === undefined;
    const decided = (record: ScheduleRecord): ActiveRun => ({
      record,
      finished: Promise.resolve(record),
      settled: Promise.resolve(),
      abandon() {},
    });
    const lostBeforeStart = (): ScheduleRecord | undefined => {
      if (deps.admissionSignal.aborted) return this.skip(request, State.Cancelled, Reason.Stopped);
      if (request.epochSignal?.aborted) return this.skip(request, State.Cancelled, Reason.LeadershipLost);
      return undefined;
    };

    if (!manual) {
      if (!options.evenInMaintenanceMode && (await deps.maintenance()))
        return decided(this.skip(request, State.Skipped, Reason.Filtered, { detail: 'maintenance' }));
      if (options.when) {
        let pass: boolean;
        try {
          pass = await withInvocation(invocation, () => options.when!(invocation));
        } catch (error) {
          return decided(
            this.skip(request, State.Failed, Reason.HookFailed, {
              detail: 'when',
              error: describeError(error),
            }),
          );
        }
        if (!pass) return decided(this.skip(request, State.Skipped, Reason.Filtered, { detail: 'when' }));
      }
      const early = lostBeforeStart();
      if (early) return decided(early);
      const slot = await deps.slots.acquire(deps.clock, deps.capacityWait, [
        deps.admissionSignal,
        request.epochSignal,
      ]);
      if (!slot) {
        const lost = lostBeforeStart();
        return decided(lost ?? this.skip(request, State.Skipped, Reason.CapacityReached));
      }
    } else deps.slots.force();

    let overlap: LeaseManager | undefined;
    if (options.withoutOverlap) {
      overlap = new LeaseManager({
        leases: deps.leases,
        key: deps.overlapKey(declaration.id),
        owner: deps.overlapOwner(),
        ttl: options.overlapTTL,
        clock: deps.clock,
        logger: deps.logger,
      });
      let held: boolean;
      try {
        held = await overlap.acquire();
      } catch (error) {
        deps.slots.release();
        deps.logger.warn('could not ask for an overlap lease; skipping the occurrence', {
          schedule: declaration.id,
          error,
        });
        return decided(
          this.skip(request, State.Skipped, Reason.CoordinationFailed, { error: describeError(error) }),
        );
      }
      if (!held) {
        deps.slots.release();
        return decided(this.skip(request, State.Skipped, Reason.OverlapBusy));
      }
      const early = lostBeforeStart();
      if (early) {
        deps.slots.release();
        await overlap.release().catch(() => undefined);
        return decided(early);
      }
    } else if (!manual) {
      const early = lostBeforeStart();
      if (early) {
        deps.slots.release();
        return decided(early);
      }
    }
    return this.#execute(request, overlap);
  }

  #execute(request: RunRequest, overlap: LeaseManager | undefined): ActiveRun {
    const deps = this.#deps;
    const { declaration, invocation } = request;
    const options = declaration.options;
    const record = deps.history.add({
      schedule: invocation.schedule,
      occurrence: invocation.occurrence,
      intendedAt: invocation.intendedAt,
      origin: invocation.origin,
      state: State.Running,
      ...(request.epoch !== undefined ? { epoch: request.epoch } : {}),
      startedAt: new Date(deps.clock.now()),
    });
    const controller = new AbortController();
    const abort = (reason: Reason, message: string) => {
      if (!controller.signal.aborted) controller.abort(new RunAbortedError(reason, message));
    };
    const cleanups: (() => void)[] = [];
    const listen = (signal: AbortSignal | undefined, reason: Reason, message: string) => {
      if (signal) cleanups.push(deps.fanout.subscribe(signal, () => abort(reason, message)));
    };
    listen(deps.stopSignal, Reason.Stopped, 'the scheduler stopped');
    listen(request.epochSignal, Reason.LeadershipLost, 'leadership of the group was lost');
    if (overlap) listen(overlap.signal, Reason.OverlapLost, 'the overlap lease was lost');
    if (options.timeout !== undefined)
      cleanups.push(
        deps.clock.setTimer(options.timeout, () =>
          abort(Reason.TimedOut, `timed out after ${options.timeout} ms`),
        ),
      );

    const context: HandlerContext = Object.freeze({ signal: controller.signal, invocation });
    const work = withInvocation(invocation, () => this.#work(declaration, context));
    let finish!: (record: ScheduleRecord) => void;
    const finished = new Promise<ScheduleRecord>((resolve) => {
      finish = resolve;
    });
    let final = false;
    const conclude = async (
      state: 'succeeded' | 'failed' | 'cancelled',
      reason?: Reason,
      error?: unknown,
    ) => {
      if (final) return;
      final = true;
      for (const cleanup of cleanups.splice(0)) cleanup();
      deps.history.finish(record, {
        state,
        ...(reason ? { reason } : {}),
        ...(error !== undefined ? { error: describeError(error) } : {}),
        finishedAt: new Date(deps.clock.now()),
      });
      deps.slots.release();
      if (state === State.Failed && options.failed) {
        try {
          await withInvocation(invocation, () => options.failed!(context, error));
        } catch (hookError) {
          deps.logger.error('failed hook threw', { schedule: declaration.id, error: hookError });
        }
      }
      finish(record);
    };

    const onAbort = () => {
      const reason = (controller.signal.reason as RunAbortedError).reason;
      const state = reason === Reason.TimedOut ? State.Failed : State.Cancelled;
      void conclude(state, reason, state === State.Failed ? controller.signal.reason : undefined);
    };
    if (controller.signal.aborted) onAbort();
    else controller.signal.addEventListener('abort', onAbort, { once: true });

    const settled = work.then(
      () => conclude(State.Succeeded),
      (failure: unknown) => {
        if (failure instanceof HookFailure) return conclude(State.Failed, Reason.HookFailed, failure.error);
        if (failure instanceof Panic) return conclude(State.Failed, Reason.Panicked, failure.error);
        return conclude(State.Failed, Reason.HandlerFailed, failure);
      },
    );
    let abandoned = false;
    const released = settled.then(async () => {
      if (!overlap || abandoned) return;
      try {
        await overlap.release();
      } catch (error) {
        deps.logger.warn('could not release an overlap lease; it will expire', {
          schedule: declaration.id,
          error,
        });
      }
    });
    return {
      record,
      finished,
      settled: released,
      abandon() {
        abandoned = true;
        overlap?.close();
      },
    };
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
