import { ClosedError, NotFoundError } from '../errors.js';
import type { Listener, Observable } from '../events.js';
import { RunLoop } from '../run-loop.js';
import {
  type AdmissionPlan,
  type Candidate,
  firstStartCursor,
  planAdmission,
  timeline,
} from './decide/admission.js';
import { ClockGuard } from './decide/clock-guard.js';
import { CursorBook, newTrack, resetTrack, type Track } from './decide/cursor-book.js';
import { DueHeap } from './decide/heap.js';
import { type Epoch, Leadership } from './decide/leadership.js';
import {
  advancesCursor,
  describeError,
  History,
  Reason,
  type ScheduleRecord,
  State,
} from './decide/records.js';
import { AbortFanout, Slots } from './decide/slots.js';
import {
  describeScheduler,
  type SchedulerDescription,
  type SchedulerEvents,
  type SchedulerSnapshot,
} from './decide/snapshot.js';
import { type ResolvedConfig, resolveConfig, type SchedulerConfig } from './declare/config.js';
import { InFlightRuns } from './run/in-flight.js';
import { type Invocation, type OccurrenceScope, occurrenceId } from './run/invocation.js';
import type { ActiveRun, RunRequest } from './run/run-types.js';
import { RunAbortedError, Runner } from './run/runner.js';
import {
  clockIncidentRecord,
  loadCursors,
  schedulerSnapshot,
  specFailedRequest,
} from './scheduler-bookkeeping.js';
import { SchedulerReports } from './scheduler-reports.js';

export type {
  LeadershipEvent,
  SchedulerDescription,
  SchedulerEvents,
  SchedulerSnapshot,
  SchedulerState,
  ScheduleSnapshot,
} from './decide/snapshot.js';
export { SCHEDULER_EVENTS } from './decide/snapshot.js';

/**
 * Runs a {@link Registry}'s declarations with one leader per group. Every replica runs a scheduler with
 * the same registry and group; they compete for the group's leadership lease and the holder alone
 * admits occurrences. See the package README ("Calendar scheduler") for the full semantics: catch-up,
 * grace, cursors, overlap, capacity, drain and the records kept.
 */
export class Scheduler implements Observable<SchedulerEvents> {
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
  readonly #leadership: Leadership;
  readonly #admission = new AbortController();
  readonly #stop = new AbortController();
  readonly #inFlight = new InFlightRuns();
  readonly #loop: RunLoop;
  #immediate = false;
  #cutDrain: (() => void) | undefined;
  /** The scheduler's first clock reading: a first start runs nothing due before it. */
  #startedAt: number | undefined;
  #overlapSeq = 0;
  #manualSeq = 0;
  readonly #reports: SchedulerReports;

  /** @throws {InvalidArgumentError} naming `config.<field>` and the value. */
  constructor(config: SchedulerConfig) {
    const c = resolveConfig(config);
    this.#config = c;
    this.#loop = new RunLoop('scheduler', c.clock);
    this.#scope = { namespace: c.namespace, environment: c.environment, group: c.group };
    this.#prefix = `${c.namespace}/calendar/${c.environment}/${c.group}/`;
    this.#reports = new SchedulerReports(c, () => this.#leadership);
    this.#history = new History(c.maxHistory, (record) => {
      try {
        c.onRecord?.(record);
      } catch {
        // onRecord's failures are its own to report (as documented).
      }
      this.#reports.recorded(record);
    });
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
      overlapRetry: c.pollInterval,
      around: (record, work) =>
        this.#reports.telemetry ? this.#reports.telemetry.run(record, work) : work(),
    });
    this.#leadership = new Leadership({
      leases: c.leases,
      key: `${this.#prefix}leader`,
      owner: c.owner,
      ttl: c.leadershipTTL,
      clock: c.clock,
      logger: c.logger,
      group: c.group,
      onLost: () => {
        this.#heap.clear();
        this.wake();
      },
      onChange: (change) => this.#reports.leadershipChanged(change),
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
   * Listens to `name` (see {@link SchedulerEvents}); returns a function that stops listening. A listener
   * that throws is logged and changes nothing.
   */
  on<K extends keyof SchedulerEvents>(name: K, listener: Listener<SchedulerEvents[K]>): () => void {
    return this.#reports.events.on(name, listener);
  }

  /** Like {@link on}, for the next event only. */
  once<K extends keyof SchedulerEvents>(name: K, listener: Listener<SchedulerEvents[K]>): () => void {
    return this.#reports.events.once(name, listener);
  }

  /** Removes a listener added with {@link on}. */
  off<K extends keyof SchedulerEvents>(name: K, listener: Listener<SchedulerEvents[K]>): void {
    this.#reports.events.off(name, listener);
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
   * @throws {NotFoundError} (`DUETIME_NOT_FOUND`) for an unknown id; {@link ClosedError} once stopping.
   */
  async runNow(id: string): Promise<ScheduleRecord> {
    if (this.#loop.state === 'draining' || this.#loop.state === 'stopped')
      throw new ClosedError(`scheduler (it is ${this.#loop.state})`);
    const track = this.#tracks.get(id);
    if (!track)
      throw new NotFoundError(
        `schedule ${JSON.stringify(id)}`,
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
    return schedulerSnapshot({
      config: this.#config,
      state: this.#loop.state,
      leadership: this.#leadership,
      slots: this.#slots,
      queued: this.#runner.queued,
      tracks: this.#tracks.values(),
      history: this.#history,
    });
  }

  describe(): SchedulerDescription {
    return describeScheduler(this.#config, this.#tracks.values());
  }

  async #run(): Promise<void> {
    this.#reports.startTelemetry(() => this.#loop.state === 'stopped');
    const unsubscribe = this.#config.wake?.(() => this.wake());
    try {
      while (this.#loop.running) {
        this.#loop.takeWake();
        let wait = this.#config.pollInterval;
        try {
          const now = this.#now();
          if (now !== undefined) {
            this.#startedAt ??= now;
            const epoch = this.#leadership.epoch ?? (await this.#tryLead(now));
            if (epoch && this.#loop.running) wait = await this.#tick(now, epoch);
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
    this.#history.add(clockIncidentRecord(detail, at));
  }

  /** Tries to lead; on success starts the epoch: every active schedule is planned afresh from its cursor. */
  async #tryLead(now: number): Promise<Epoch | undefined> {
    let epoch: Epoch | undefined;
    try {
      epoch = await this.#leadership.tryLead();
    } catch (error) {
      this.#config.logger.warn('could not ask for leadership; retrying at the next poll', { error });
      return undefined;
    }
    if (!epoch) return undefined;
    if (!this.#loop.running) {
      await this.#leadership.resign().catch(() => undefined);
      return undefined;
    }
    this.#heap.clear();
    for (const track of this.#tracks.values()) {
      if (!track.active) continue;
      resetTrack(track, epoch.token);
      const horizon = Math.max(this.#config.grace, track.declaration.options.catchUp?.window ?? 0);
      this.#schedule(track, now - horizon);
    }
    return epoch;
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
    this.#runner.skip(specFailedRequest(track, at), State.Skipped, Reason.ClockFailed, {
      detail: `the schedule's spec threw: ${describeError(error)}`,
    });
  }

  /** Admits what is due; returns how long to sleep before the next look. */
  async #tick(now: number, epoch: Epoch): Promise<number> {
    this.#cursors.retry();
    const due: Track[] = [];
    for (let top = this.#heap.peek(); top && top.due <= now; top = this.#heap.peek())
      due.push(this.#heap.pop() as Track);
    const readFailed = await loadCursors(due, this.#cursors, this.#config.logger);
    // Re-check validity here, not only through the loss timer: a blocked event loop may have let it lapse.
    if (!this.#leadership.holds(epoch) || !this.#loop.running) {
      for (const track of due) if (track.active && this.#leadership.epoch === epoch) this.#heap.upsert(track);
      return 0;
    }
    let budget = this.#config.maxPerTick;
    for (const track of due) {
      if (budget <= 0 || !track.loaded) {
        this.#heap.upsert(track);
        continue;
      }
      let plan: AdmissionPlan;
      try {
        const decidedThrough = track.decidedThrough ?? this.#firstStart(track, now);
        plan = planAdmission({
          timeline: track.timeline,
          decidedThrough,
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
   * A schedule without a cursor (a first start, or a cursor that expired) begins where
   * {@link firstStartCursor} says: by default nothing due before the scheduler started runs. That instant
   * is persisted as the cursor at once, before anything admitted now finishes: a leader taking over after
   * a crash then re-runs, catches up or reports as missed what this epoch admitted, instead of starting
   * afresh and dropping it without a record.
   */
  #firstStart(track: Track, now: number): number {
    const cursor = firstStartCursor({
      timeline: track.timeline,
      startedAt: this.#startedAt ?? now,
      now,
      grace: this.#config.grace,
      catchUp: track.declaration.options.catchUp,
    });
    track.decidedThrough = cursor;
    this.#cursors.skipped(track, cursor);
    return cursor;
  }

  #apply(track: Track, plan: AdmissionPlan, epoch: Epoch): void {
    const id = track.declaration.id;
    const group = (reason: Reason, folded: { latest: number; count: number; capped: boolean }) => {
      this.#runner.skip(
        {
          declaration: track.declaration,
          invocation: this.#invocation(id, { at: folded.latest, origin: 'scheduled' }, epoch),
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
        invocation: this.#invocation(id, candidate, epoch),
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

  #invocation(schedule: string, candidate: Candidate, epoch: Epoch): Invocation {
    return Object.freeze({
      schedule,
      occurrence: occurrenceId(this.#scope, schedule, candidate.at),
      intendedAt: new Date(candidate.at),
      origin: candidate.origin,
      epoch: epoch.token,
    });
  }

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
    if (this.#leadership.epoch) {
      try {
        await this.#leadership.resign();
      } catch (error) {
        c.logger.warn('could not release leadership; it will expire', { error });
      }
    }
    this.#leadership.close();
    this.#heap.clear();
    this.#reports.telemetry?.close();
  }
}
