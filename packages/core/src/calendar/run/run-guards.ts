import { LeaseManager } from '../../lease/lease-manager.js';
import type { Logger } from '../../logger.js';
import { OverlapQueue } from '../decide/overlap-queue.js';
import { describeError, Reason, type ScheduleRecord, State } from '../decide/records.js';
import type { Slots } from '../decide/slots.js';
import { withInvocation } from './invocation.js';
import type { RunnerDependencies, RunRequest } from './run-types.js';

/**
 * The checks an occurrence passes before its handler runs, as one pipeline: maintenance → `when` →
 * still admitted → concurrency slot → overlap lease → still admitted. Each guard either lets the run go
 * on (possibly taking a resource into its {@link Holdings}) or decides it with a record; whatever was
 * taken is then released in one place, by the caller of the pipeline.
 *
 * With `onOverlap: 'queue'` the overlap lease comes before the slot, and a busy lease is waited for (one
 * occurrence per schedule) instead of skipping: a queued occurrence must not sit on a concurrency slot
 * while it waits for its own schedule's previous run (with `concurrency: 1` it could never get one).
 */

/** Records a decision that ran nothing (the runner's `skip`). */
export type Decide = (
  request: RunRequest,
  state: typeof State.Skipped | typeof State.Cancelled | typeof State.Failed,
  reason: Reason,
  extra?: Partial<ScheduleRecord>,
) => ScheduleRecord;

/** One check: `undefined` to go on, or the record of the decision that ends the run before it starts. */
export type Guard = (
  request: RunRequest,
  held: Holdings,
) => ScheduleRecord | undefined | Promise<ScheduleRecord | undefined>;

/** What a run took before its handler starts: a concurrency slot, an overlap lease. Each is released once. */
export class Holdings {
  readonly #slots: Slots;
  readonly #logger: Logger;
  readonly #schedule: string;
  readonly #onOverlapReleased: () => void;
  #slot = false;
  #overlap: LeaseManager | undefined;

  /** @param onOverlapReleased called once the overlap lease has been released (a queued run may take it). */
  constructor(slots: Slots, logger: Logger, schedule: string, onOverlapReleased: () => void = () => {}) {
    this.#slots = slots;
    this.#logger = logger;
    this.#schedule = schedule;
    this.#onOverlapReleased = onOverlapReleased;
  }

  /** The overlap lease, while held. */
  get overlap(): LeaseManager | undefined {
    return this.#overlap;
  }

  tookSlot(): void {
    this.#slot = true;
  }

  tookOverlap(lease: LeaseManager): void {
    this.#overlap = lease;
  }

  /** Frees the concurrency slot (once): when the run is decided, even if its handler never settles. */
  releaseSlot(): void {
    if (!this.#slot) return;
    this.#slot = false;
    this.#slots.release();
  }

  /** Frees the overlap lease (once): when the handler has actually settled. */
  async releaseOverlap(): Promise<void> {
    const lease = this.#overlap;
    if (!lease) return;
    this.#overlap = undefined;
    try {
      await lease.release();
    } catch (error) {
      this.#logger.warn('could not release an overlap lease; it will expire', {
        schedule: this.#schedule,
        error,
      });
    }
    this.#onOverlapReleased();
  }

  /** Stops renewing the overlap lease without releasing it (the process is leaving): it expires. */
  abandonOverlap(): void {
    this.#overlap?.close();
    this.#overlap = undefined;
  }

  /** Frees everything still held. */
  async releaseAll(): Promise<void> {
    this.releaseSlot();
    await this.releaseOverlap();
  }
}

/** The guards of one scheduler's runs. */
export class RunGuards {
  readonly #deps: RunnerDependencies;
  readonly #decide: Decide;
  readonly #queue: OverlapQueue;

  constructor(deps: RunnerDependencies, decide: Decide) {
    this.#deps = deps;
    this.#decide = decide;
    this.#queue = new OverlapQueue(deps.clock, deps.fanout, deps.overlapRetry);
  }

  /** Occurrences waiting for their schedule's previous run (`onOverlap: 'queue'`). */
  get queued(): number {
    return this.#queue.size;
  }

  /** A run of `schedule` released its overlap lease: the occurrence queued behind it tries at once. */
  overlapReleased(schedule: string): void {
    this.#queue.wake(schedule);
  }

  /**
   * The pipeline for `request`. Manual runs (`runNow`, no epoch) skip maintenance and `when` and take a
   * slot whatever the limit; `withoutOverlap` adds the overlap lease, before the slot when it queues.
   */
  pipeline(request: RunRequest): Guard[] {
    const manual = request.epochSignal === undefined;
    const options = request.declaration.options;
    const slot = manual ? this.#forcedSlot : this.#slot;
    const guards: Guard[] = [];
    if (!manual) {
      if (!options.evenInMaintenanceMode) guards.push(this.#maintenance);
      if (options.when) guards.push(this.#when);
    }
    guards.push(this.#stillAdmitted);
    if (!options.withoutOverlap) guards.push(slot);
    else if (options.onOverlap === 'queue') guards.push(this.#queuedOverlapLease, slot);
    else guards.push(slot, this.#overlapLease);
    guards.push(this.#stillAdmitted);
    return guards;
  }

  readonly #maintenance: Guard = async (request) => {
    if (!(await this.#deps.maintenance())) return undefined;
    return this.#decide(request, State.Skipped, Reason.Filtered, { detail: 'maintenance' });
  };

  readonly #when: Guard = async (request) => {
    const { invocation } = request;
    const when = request.declaration.options.when;
    if (!when) return undefined;
    let pass: boolean;
    try {
      pass = await withInvocation(invocation, () => when(invocation));
    } catch (error) {
      return this.#decide(request, State.Failed, Reason.HookFailed, {
        detail: 'when',
        error: describeError(error),
      });
    }
    return pass ? undefined : this.#decide(request, State.Skipped, Reason.Filtered, { detail: 'when' });
  };

  /** Cancels a run whose scheduler started draining, or whose leadership ended, before it started. */
  readonly #stillAdmitted: Guard = (request) => {
    if (this.#deps.admissionSignal.aborted) return this.#decide(request, State.Cancelled, Reason.Stopped);
    if (request.epochSignal?.aborted) return this.#decide(request, State.Cancelled, Reason.LeadershipLost);
    return undefined;
  };

  readonly #slot: Guard = async (request, held) => {
    const deps = this.#deps;
    const signals = [deps.admissionSignal, request.epochSignal];
    if (await deps.slots.acquire(deps.clock, deps.capacityWait, signals)) {
      held.tookSlot();
      return undefined;
    }
    return this.#stillAdmitted(request, held) ?? this.#decide(request, State.Skipped, Reason.CapacityReached);
  };

  readonly #forcedSlot: Guard = (_request, held) => {
    this.#deps.slots.force();
    held.tookSlot();
    return undefined;
  };

  /** Asks once for the schedule's overlap lease: resolves it, `undefined` when busy, or the deciding record. */
  async #askOverlapLease(request: RunRequest): Promise<LeaseManager | undefined | ScheduleRecord> {
    const deps = this.#deps;
    const { declaration } = request;
    const lease = new LeaseManager({
      leases: deps.leases,
      key: deps.overlapKey(declaration.id),
      owner: deps.overlapOwner(),
      ttl: declaration.options.overlapTTL,
      clock: deps.clock,
      logger: deps.logger,
    });
    try {
      return (await lease.acquire()) ? lease : undefined;
    } catch (error) {
      deps.logger.warn('could not ask for an overlap lease; skipping the occurrence', {
        schedule: declaration.id,
        error,
      });
      return this.#decide(request, State.Skipped, Reason.CoordinationFailed, { error: describeError(error) });
    }
  }

  /** `onOverlap: 'skip'`: a busy lease skips the occurrence for good. */
  readonly #overlapLease: Guard = async (request, held) => {
    const got = await this.#askOverlapLease(request);
    if (got === undefined) return this.#decide(request, State.Skipped, Reason.OverlapBusy);
    if (!(got instanceof LeaseManager)) return got;
    held.tookOverlap(got);
    return undefined;
  };

  /**
   * `onOverlap: 'queue'`: a busy lease is waited for, by one occurrence per schedule; another one that
   * comes while it waits is skipped (`overlap_busy`, the queued run after the current one covers it),
   * without asking for the lease: a holder in another process may have let go since the waiting one last
   * asked, and the lease goes to the waiting one first.
   */
  readonly #queuedOverlapLease: Guard = async (request, held) => {
    const id = request.declaration.id;
    const queued = () =>
      this.#decide(request, State.Skipped, Reason.OverlapBusy, { detail: 'a run is already queued' });
    if (this.#queue.waiting(id)) return queued();
    let got = await this.#askOverlapLease(request);
    if (got !== undefined) return this.#tookOrDecided(got, held);
    if (!this.#queue.join(id)) return queued();
    try {
      const signals = [this.#deps.admissionSignal, request.epochSignal];
      for (;;) {
        await this.#queue.wait(id, signals);
        const stopped = this.#stillAdmitted(request, held);
        if (stopped) return stopped;
        got = await this.#askOverlapLease(request);
        if (got !== undefined) return this.#tookOrDecided(got, held);
      }
    } finally {
      this.#queue.leave(id);
    }
  };

  #tookOrDecided(got: LeaseManager | ScheduleRecord, held: Holdings): ScheduleRecord | undefined {
    if (!(got instanceof LeaseManager)) return got;
    held.tookOverlap(got);
    return undefined;
  }
}
