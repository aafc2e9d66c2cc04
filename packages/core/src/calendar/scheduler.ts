import { ClosedError, DuetimeError } from '../errors.js';
import { type LeaseLostError, LeaseManager } from '../lease/lease-manager.js';
import { RunLoop } from '../run-loop.js';
import { type AdmissionPlan, type Candidate, planAdmission, timeline } from './admission.js';
import { ClockGuard } from './clock-guard.js';
import { type ResolvedConfig, resolveConfig, type SchedulerConfig } from './config.js';
import { CursorBook, newTrack, resetTrack, type Track } from './cursor-book.js';
import { DueHeap } from './heap.js';
import { InFlightRuns } from './in-flight.js';
import { type Invocation, type OccurrenceScope, occurrenceId } from './invocation.js';
import { advancesCursor, describeError, History, Reason, type ScheduleRecord, State } from './records.js';
import { AbortFanout, type ActiveRun, RunAbortedError, Runner, type RunRequest, Slots } from './runner.js';
import {
  describeScheduler,
  type SchedulerDescription,
  type SchedulerSnapshot,
  scheduleSnapshots,
} from './snapshot.js';

export type {
  SchedulerDescription,
  SchedulerSnapshot,
  SchedulerState,
  ScheduleSnapshot,
} from './snapshot.js';

const CURSOR_READS_AT_ONCE = 32;

/**
 * Runs a {@link Registry}'s declarations with one leader per group. Every replica runs a scheduler with
 * the same registry and group; they compete for the group's leadership lease and the holder alone
 * admits occurrences. See the package README ("Calendar scheduler") for the full semantics: catch-up,
 * grace, cursors, overlap, capacity, drain and the records kept.
 */
export class Scheduler {
  readonly #config: ResolvedConfig;
  readonly #scope: OccurrenceScope;
  readonly #prefix: string;
  readonly #tracks = new Map<string, Track>();
  readonly #heap = new DueHeap<Track>();
  readonly #history: History;
  readonly #time: ClockGuard;
  readonly #slots: Slots;
  readonly #runner: Runner;
  readonly #cursors: CursorBook;
  readonly #leader: LeaseManager;
  readonly #admission = new AbortController();
  readonly #stop = new AbortController();
  readonly #inFlight = new InFlightRuns();
  #epoch: { token: number; signal: AbortSignal } | undefined;
  readonly #loop: RunLoop;
  #immediate = false;
  #cutDrain: (() => void) | undefined;
  #overlapSeq = 0;
  #manualSeq = 0;

  /** @throws {InvalidArgumentError} naming `config.<field>` and the value. */
  constructor(config: SchedulerConfig) {
    const c = resolveConfig(config);
    this.#config = c;
    this.#loop = new RunLoop('scheduler', c.clock);
    this.#scope = { namespace: c.namespace, environment: c.environment, group: c.group };
    this.#prefix = `${c.namespace}/calendar/${c.environment}/${c.group}/`;
    this.#history = new History(c.maxHistory, c.onRecord);
    this.#time = new ClockGuard(c.clock, (detail, at) => this.#clockIncident(detail, at));
    const fanout = new AbortFanout();
    this.#slots = new Slots(c.concurrency, fanout);
    this.#cursors = new CursorBook(c.cursors, c.cursorTTL, c.logger);
    this.#runner = new Runner({
      leases: c.leases,
      clock: c.clock,
      logger: c.logger,
      history: this.#history,
      slots: this.#slots,
      capacityWait: c.capacityWait,
      overlapKey: (id) => `${this.#prefix}overlap/${id}`,
      overlapOwner: () => `${c.owner}#${++this.#overlapSeq}`,
      maintenance: async () => {
        try {
          return await c.maintenance();
        } catch (error) {
          c.logger.warn('maintenance check threw; assuming not in maintenance', { error });
          return false;
        }
      },
      admissionSignal: this.#admission.signal,
      stopSignal: this.#stop.signal,
      fanout,
    });
    this.#leader = new LeaseManager({
      leases: c.leases,
      key: `${this.#prefix}leader`,
      owner: c.owner,
      ttl: c.leadershipTTL,
      clock: c.clock,
      logger: c.logger,
      onLost: (error) => this.#onLeadershipLost(error),
    });
    for (const declaration of c.registry) {
      const environments = declaration.options.environments;
      const active = environments === undefined || environments.includes(c.environment);
      const track = newTrack(
        declaration,
        timeline(declaration.spec, declaration.options.windows),
        `${this.#prefix}cursor/${declaration.id}`,
        active,
      );
      this.#tracks.set(declaration.id, track);
    }
  }

  /**
   * Runs until `signal` aborts (then drains) or `drain()` / `stop()` is called; resolves when stopped.
   * Call it once.
   */
  run(signal?: AbortSignal): Promise<void> {
    return this.#loop.start(
      () => this.#run(),
      signal,
      () => void this.drain(),
    );
  }

  /** Resolves when the scheduler has stopped (at once when it never ran). */
  get done(): Promise<void> {
    return this.#loop.done;
  }

  /** Looks again at once (leadership and due occurrences) instead of at the next poll. */
  wake(): void {
    this.#loop.wake();
  }

  /**
   * Stops admitting occurrences and waits for running handlers, up to `drainTimeout`, still holding
   * leadership and overlap leases; then cancels the rest (`stopped`) and releases leadership.
   */
  async drain(): Promise<void> {
    await this.#loop.drain();
  }

  /** Like {@link drain} without waiting: running handlers are aborted and recorded as cancelled (`stopped`). */
  async stop(): Promise<void> {
    this.#immediate = true;
    this.#cutDrain?.();
    await this.drain();
  }

  /**
   * Runs a declaration now, whoever leads (origin `manual`): hooks, `timeout` and `withoutOverlap` apply;
   * `when`, maintenance and capacity limits do not, and the cursor does not move. Resolves with the
   * finished record.
   *
   * @throws {DuetimeError} `DUETIME_NOT_FOUND` for an unknown id; {@link ClosedError} once stopping.
   */
  async runNow(id: string): Promise<ScheduleRecord> {
    if (this.#loop.state === 'draining' || this.#loop.state === 'stopped')
      throw new ClosedError(`scheduler (it is ${this.#loop.state})`);
    const track = this.#tracks.get(id);
    if (!track)
      throw new DuetimeError(
        'DUETIME_NOT_FOUND',
        `no schedule with id ${JSON.stringify(id)} in the registry`,
      );
    const now = this.#now() ?? this.#config.clock.now();
    const invocation: Invocation = Object.freeze({
      schedule: id,
      occurrence: occurrenceId(this.#scope, id, now, `${this.#config.owner}:${++this.#manualSeq}`),
      intendedAt: new Date(now),
      origin: 'manual',
    });
    const run = await this.#start({ declaration: track.declaration, invocation }, () => {});
    return { ...(await run.finished) };
  }

  snapshot(): SchedulerSnapshot {
    const epoch = this.#epoch;
    return {
      state: this.#loop.state,
      leader: epoch !== undefined && this.#leader.held,
      ...(epoch ? { epoch: epoch.token } : {}),
      owner: this.#config.owner,
      namespace: this.#config.namespace,
      environment: this.#config.environment,
      group: this.#config.group,
      running: this.#slots.used,
      waiting: this.#slots.waiting,
      schedules: scheduleSnapshots(
        this.#tracks.values(),
        epoch !== undefined,
        this.#config.cursors !== undefined,
      ),
      history: this.#history.records(),
      counts: this.#history.counts(),
    };
  }

  describe(): SchedulerDescription {
    return describeScheduler(this.#config, this.#tracks.values());
  }

  async #run(): Promise<void> {
    const unsubscribe = this.#config.wake?.(() => this.wake());
    try {
      while (this.#loop.running) {
        this.#loop.takeWake();
        let wait = this.#config.pollInterval;
        try {
          const now = this.#now();
          if (now !== undefined) {
            if (!this.#epoch) await this.#tryLead(now);
            if (this.#epoch && this.#loop.running) wait = await this.#tick(now);
          }
        } catch (error) {
          this.#config.logger.error('scheduler tick failed; retrying at the next poll', { error });
        }
        if (wait <= 0) await new Promise<void>((resolve) => setImmediate(resolve));
        else await this.#loop.sleep(wait);
      }
    } finally {
      if (typeof unsubscribe === 'function') unsubscribe();
      await this.#shutdown();
    }
  }

  #now(): number | undefined {
    return this.#time.read();
  }

  #clockIncident(detail: string, at: number): void {
    this.#config.logger.error('clock incident', { detail });
    this.#history.add({
      schedule: '*',
      occurrence: '',
      intendedAt: new Date(at),
      origin: 'scheduled',
      state: State.Skipped,
      reason: Reason.ClockFailed,
      detail,
      finishedAt: new Date(at),
    });
  }

  async #tryLead(now: number): Promise<void> {
    let held: boolean;
    try {
      held = await this.#leader.acquire();
    } catch (error) {
      this.#config.logger.warn('could not ask for leadership; retrying at the next poll', { error });
      return;
    }
    if (!held) return;
    if (!this.#loop.running) {
      await this.#leader.release().catch(() => undefined);
      return;
    }
    const token = this.#leader.token as number;
    this.#epoch = { token, signal: this.#leader.signal };
    this.#heap.clear();
    for (const track of this.#tracks.values()) {
      if (!track.active) continue;
      resetTrack(track, token);
      const horizon = Math.max(this.#config.grace, track.declaration.options.catchUp?.window ?? 0);
      this.#schedule(track, now - horizon);
    }
    this.#config.logger.info('became leader', {
      group: this.#config.group,
      epoch: token,
      owner: this.#config.owner,
    });
  }

  #onLeadershipLost(error: LeaseLostError): void {
    if (!this.#epoch) return;
    this.#config.logger.warn('lost leadership', {
      group: this.#config.group,
      epoch: this.#epoch.token,
      reason: error.reason,
    });
    this.#epoch = undefined;
    this.#heap.clear();
    this.wake();
  }

  /** Puts `track` in the heap at its first occurrence after `after` (out of it when there is none). */
  #schedule(track: Track, after: number): void {
    let next: number;
    try {
      next = track.timeline.nextMs(after);
      if (next <= after)
        throw new Error(`next(${new Date(after).toISOString()}) returned an instant not after it`);
    } catch (error) {
      this.#specFailed(track, error);
      return;
    }
    track.due = next;
    if (Number.isNaN(next)) this.#heap.remove(track);
    else this.#heap.upsert(track);
  }

  #specFailed(track: Track, error: unknown): void {
    track.due = Number.NaN;
    this.#heap.remove(track);
    this.#config.logger.error('a schedule spec failed; the schedule is paused until the next leadership', {
      schedule: track.declaration.id,
      error,
    });
    const at = this.#time.highWater;
    this.#runner.skip(
      {
        declaration: track.declaration,
        invocation: {
          schedule: track.declaration.id,
          occurrence: '',
          intendedAt: new Date(at),
          origin: 'scheduled',
        },
      },
      State.Skipped,
      Reason.ClockFailed,
      { detail: `the schedule's spec threw: ${describeError(error)}` },
    );
  }

  /** Admits what is due; returns how long to sleep before the next look. */
  async #tick(now: number): Promise<number> {
    const epoch = this.#epoch;
    if (!epoch) return this.#config.pollInterval;
    this.#cursors.retry();
    const due: Track[] = [];
    for (let top = this.#heap.peek(); top && top.due <= now; top = this.#heap.peek())
      due.push(this.#heap.pop() as Track);
    let readFailed = false;
    const unloaded = due.filter((t) => !t.loaded);
    for (let i = 0; i < unloaded.length; i += CURSOR_READS_AT_ONCE) {
      const batch = unloaded.slice(i, i + CURSOR_READS_AT_ONCE);
      const results = await Promise.allSettled(batch.map((t) => this.#cursors.load(t)));
      results.forEach((result, j) => {
        if (result.status === 'rejected') {
          readFailed = true;
          this.#config.logger.warn('could not read a schedule cursor; retrying at the next poll', {
            schedule: batch[j]?.declaration.id,
            error: result.reason,
          });
        }
      });
    }
    // Re-check validity here, not only through the loss timer: a blocked event loop may have let it lapse.
    if (this.#epoch !== epoch || !this.#loop.running || !this.#leader.held) {
      for (const track of due) if (track.active && this.#epoch === epoch) this.#heap.upsert(track);
      return 0;
    }
    let budget = this.#config.maxPerTick;
    for (const track of due) {
      if (budget <= 0 || !track.loaded) {
        this.#heap.upsert(track);
        continue;
      }
      if (track.decidedThrough === undefined) this.#firstStart(track, now);
      let plan: AdmissionPlan;
      try {
        plan = planAdmission({
          timeline: track.timeline,
          decidedThrough: track.decidedThrough,
          now,
          grace: this.#config.grace,
          catchUp: track.declaration.options.catchUp,
          limit: budget,
        });
      } catch (error) {
        this.#specFailed(track, error);
        continue;
      }
      this.#apply(track, plan, epoch);
      budget -= plan.run.length;
      track.decidedThrough = Math.max(track.decidedThrough ?? plan.through, plan.through);
      this.#schedule(track, track.decidedThrough);
    }
    const top = this.#heap.peek();
    if (readFailed) return this.#config.pollInterval;
    if (!top) return this.#config.pollInterval;
    return top.due <= now ? 0 : Math.min(this.#config.pollInterval, top.due - now);
  }

  /**
   * A schedule without a cursor (a first start, or a cursor that expired) considers only the occurrences
   * within `grace`. It persists where that window begins as its cursor at once, before anything it admits
   * finishes: a leader taking over after a crash then re-runs, catches up or reports as missed what this
   * epoch admitted, instead of starting afresh and dropping it without a record.
   */
  #firstStart(track: Track, now: number): void {
    let before: number;
    try {
      before = track.timeline.prevMs(now - this.#config.grace + 1);
    } catch {
      return; // The plan below meets the same failure and reports it.
    }
    if (!Number.isNaN(before)) this.#cursors.skipped(track, before);
  }

  #apply(track: Track, plan: AdmissionPlan, epoch: { token: number; signal: AbortSignal }): void {
    const id = track.declaration.id;
    const group = (reason: Reason, folded: { latest: number; count: number; capped: boolean }) => {
      this.#runner.skip(
        {
          declaration: track.declaration,
          invocation: this.#invocation(id, { at: folded.latest, origin: 'scheduled' }),
          epoch: epoch.token,
        },
        State.Skipped,
        reason,
        { count: folded.count, ...(folded.capped ? { detail: `at least ${folded.count}` } : {}) },
      );
      this.#cursors.skipped(track, folded.latest);
    };
    if (plan.missed) group(Reason.Missed, plan.missed);
    if (plan.backlog) group(Reason.BacklogLimited, plan.backlog);
    for (const candidate of plan.run) {
      this.#cursors.admitted(track, candidate.at);
      track.running++;
      const request: RunRequest = {
        declaration: track.declaration,
        invocation: this.#invocation(id, candidate),
        epoch: epoch.token,
        epochSignal: epoch.signal,
      };
      void this.#start(request, (record) => {
        track.running--;
        if (track.epoch === epoch.token)
          this.#cursors.finished(track, candidate.at, advancesCursor(record.state));
      });
    }
  }

  #invocation(schedule: string, candidate: Candidate): Invocation {
    return Object.freeze({
      schedule,
      occurrence: occurrenceId(this.#scope, schedule, candidate.at),
      intendedAt: new Date(candidate.at),
      origin: candidate.origin,
    });
  }

  /** Starts a run and tracks it for drain and stop; `onFinished` gets its final record. */
  /** Starts a run and tracks it for drain and stop; `onFinished` gets its final record. */
  #start(request: RunRequest, onFinished: (record: ScheduleRecord) => void): Promise<ActiveRun> {
    return this.#inFlight.start(this.#runner, request, onFinished, this.#config.logger);
  }

  /** Cancels what has not started, waits for handlers up to the drain timeout, then lets go of everything. */
  async #shutdown(): Promise<void> {
    const c = this.#config;
    this.#admission.abort(new RunAbortedError(Reason.Stopped, 'the scheduler is draining'));
    const waitMs = this.#immediate ? 0 : c.drainTimeout;
    if (this.#inFlight.size > 0 && waitMs > 0) {
      let cancelTimer: (() => void) | undefined;
      await Promise.race([
        this.#inFlight.allSettled(),
        new Promise<void>((resolve) => {
          cancelTimer = c.clock.setTimer(waitMs, resolve);
          this.#cutDrain = resolve;
        }),
      ]);
      cancelTimer?.();
      this.#cutDrain = undefined;
    }
    if (this.#inFlight.size > 0)
      c.logger.warn('stopping with handlers still running; cancelling them', {
        running: this.#inFlight.size,
      });
    this.#stop.abort(new RunAbortedError(Reason.Stopped, 'the scheduler stopped'));
    this.#inFlight.abandonAll();
    // Let the cancelled records finish (their failed hooks run) before the last cursor writes.
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.#cursors.flush();
    await this.#cursors.settle();
    if (this.#epoch) {
      this.#epoch = undefined;
      try {
        await this.#leader.release();
      } catch (error) {
        c.logger.warn('could not release leadership; it will expire', { error });
      }
    }
    this.#leader.close();
    this.#heap.clear();
  }
}
