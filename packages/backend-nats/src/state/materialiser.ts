import { BackendError, ClosedError, CorruptDataError, type Logger, NotSupportedError } from '@duetime/core';
import type { Subscription } from '@nats-io/transport-node';
import type { NatsIo, PublishResult, StoredMessage } from '../io.js';
import type { Layout } from '../layout.js';
import { headerWrite, PLANNER_VERSION, type Plan, plan } from './planner.js';
import { KIND_HEADER, type NodeCache, PREV_HEADER, Snapshot, StaleSnapshot } from './snapshot.js';
import {
  type AbortValue,
  type Entry,
  emptyMeta,
  type LoggedEntry,
  type Meta,
  type PlanHeader,
} from './types.js';

/** Hooks that let tests stop a process at chosen points of materialisation. Not for production use. */
export interface MaterialiserHooks {
  /**
   * Called before chained write `index` of a plan is sent (0 is the header; `total` is unknown then, and
   * the last write, the meta record, is `total - 1`).
   */
  beforeWrite?(index: number, header: PlanHeader, total: number | undefined): void | Promise<void>;
}

/** The applied state at one chain position: what read snapshots are taken from. */
export interface AppliedState {
  meta: Meta;
  /** Sequence of the meta record (0 before the first plan). */
  seq: number;
}

export interface MaterialiserOptions {
  /** How long a plan another process started may make no progress before this one finishes it. */
  stallMs: number;
  hooks?: MaterialiserHooks;
  logger: Logger;
}

/** Log entries one plan covers at most. */
const ENTRIES_PER_PLAN = 64;
/** The log entries of one plan are kept within this many bytes (one larger entry makes a plan alone). */
const PLAN_ENTRY_BYTES = 8 * 1024 * 1024;
/** Chained writes of a plan in flight at once. */
const WRITE_WINDOW = 512;
/** Applied log entries are purged from the log once this many have accumulated. */
const TRIM_EVERY = 64;

interface Waiter {
  target: number;
  resolve(state: AppliedState): void;
  reject(error: unknown): void;
}

/**
 * Applies the commit log to the state stream, as a chain of plans. Any process may run it; each plan
 * is a header, its data writes and a new meta record, every one published with
 * `Nats-Expected-Last-Sequence` equal to the position before it, so exactly one message fills each
 * position of the chain. The process whose header lands first owns the plan; the others wait, and
 * finish it (recomputing the same writes from the header) if it stops making progress.
 */
export class Materialiser {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #cache: NodeCache;
  readonly #options: MaterialiserOptions;
  readonly #waiters: Waiter[] = [];
  readonly #outcomes = new Map<number, AbortValue | undefined>();
  #running: Promise<void> | undefined;
  #ownBase = -1;
  #highestApplied = 0;
  #trimmed = 0;
  #cleanup: Promise<void> = Promise.resolve();
  #closed = false;
  #metaSub: Subscription | undefined;
  #poke: (() => void) | undefined;

  constructor(io: NatsIo, layout: Layout, cache: NodeCache, options: MaterialiserOptions) {
    this.#io = io;
    this.#layout = layout;
    this.#cache = cache;
    this.#options = options;
  }

  /**
   * Writes the chain's first head (an empty meta record) into an empty state stream, so the stream is
   * never empty again (see {@link Layout.logAnchor} for why that matters).
   */
  async genesis(): Promise<void> {
    const meta = emptyMeta();
    await this.#io.publish(this.#layout.head, JSON.stringify(meta), {
      expectLastSeq: 0,
      headers: { [KIND_HEADER]: 'meta', [PREV_HEADER]: '0' },
    });
  }

  /** The highest applied log sequence this process has seen. */
  get highestApplied(): number {
    return this.#highestApplied;
  }

  #seen(state: AppliedState, logHead: number): AppliedState {
    if (logHead < state.meta.applied)
      throw new CorruptDataError(
        `stream ${this.#layout.logStream}: its last sequence ${logHead} is behind the applied state (${state.meta.applied}); the stream was emptied and recreated, or its sequence reset (a NATS 2.9 server restart after its last message was purged), and commits logged since may be ignored. Stop every process and restore the stream, or move its sequence past ${state.meta.applied} (purge with seq ${state.meta.applied + 1})`,
      );
    if (state.meta.applied > this.#highestApplied) this.#highestApplied = state.meta.applied;
    return state;
  }

  /** Starts listening for other processes' progress (a hint that shortens waits). */
  start(): void {
    this.#metaSub = this.#io.nc.subscribe(this.#layout.head, { callback: () => this.#poke?.() });
  }

  /** Resolves once every log entry up to `target` is applied, with the state it saw. */
  through(target: number): Promise<AppliedState> {
    if (this.#closed) return Promise.reject(new ClosedError('nats backend'));
    return new Promise((resolve, reject) => {
      this.#waiters.push({ target, resolve, reject });
      this.#kick();
    });
  }

  /** The applied state now, applying first whatever the log holds beyond it. */
  async current(): Promise<AppliedState> {
    if (this.#closed) throw new ClosedError('nats backend');
    const [head, { state, open }] = await Promise.all([
      this.#io.lastSeq(this.#layout.logStream),
      this.#readHead(),
    ]);
    this.#seen(state, head);
    if (!open && state.meta.applied >= head) return state;
    return this.through(head);
  }

  /**
   * Why the entry at log sequence `seq` did not take effect, or undefined when it committed. Call after
   * {@link through} reached `seq`.
   */
  async outcome(seq: number, state: AppliedState): Promise<AbortValue | undefined> {
    if (this.#outcomes.has(seq)) {
      const known = this.#outcomes.get(seq);
      this.#outcomes.delete(seq);
      return known;
    }
    const record = await this.#io.last(this.#layout.stateStream, this.#layout.abort(seq));
    if (record) return record.json<AbortValue>();
    if (seq <= state.meta.abortFloor)
      throw new BackendError(
        'read the outcome of a commit',
        `the outcome of log entry ${seq} is no longer recorded; it committed unless it conflicted`,
        { transient: true },
      );
    return undefined;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#metaSub?.unsubscribe();
    this.#poke?.();
    await this.#running?.catch(() => {});
    await this.#cleanup;
    for (const w of this.#waiters.splice(0)) w.reject(new ClosedError('nats backend'));
  }

  #kick(): void {
    if (this.#running) return;
    this.#running = this.#loop().finally(() => {
      this.#running = undefined;
      if (this.#waiters.length > 0 && !this.#closed) this.#kick();
    });
  }

  async #loop(): Promise<void> {
    while (this.#waiters.length > 0) {
      if (this.#closed) {
        for (const w of this.#waiters.splice(0)) w.reject(new ClosedError('nats backend'));
        return;
      }
      const target = Math.max(...this.#waiters.map((w) => w.target));
      let state: AppliedState;
      try {
        state = await this.#step(target);
      } catch (error) {
        if (error instanceof StaleSnapshot) continue;
        for (const w of this.#waiters.splice(0)) w.reject(error);
        return;
      }
      for (let i = this.#waiters.length - 1; i >= 0; i--) {
        const w = this.#waiters[i] as Waiter;
        if (w.target <= state.meta.applied) {
          this.#waiters.splice(i, 1);
          w.resolve(state);
        }
      }
    }
  }

  /** The chain's head: the applied state, and the plan open on top of it, if any. */
  async #readHead(): Promise<{ state: AppliedState; open: PlanHeader | undefined }> {
    const head = await this.#io.last(this.#layout.stateStream, this.#layout.head);
    if (!head) return { state: { meta: emptyMeta(), seq: 0 }, open: undefined };
    if (head.header(KIND_HEADER) === 'meta')
      return { state: { meta: head.json<Meta>(), seq: head.seq }, open: undefined };
    const open = head.json<PlanHeader>();
    if (open.base !== head.seq - 1)
      throw new CorruptDataError(
        `stream ${this.#layout.stateStream}: plan header ${head.seq} does not follow its base ${open.base}`,
      );
    if (open.base === 0) return { state: { meta: emptyMeta(), seq: 0 }, open };
    const before = await this.#io.at(this.#layout.stateStream, open.base);
    if (!before || before.subject !== this.#layout.head || before.header(KIND_HEADER) !== 'meta') {
      // The plan completed and the next one replaced its meta in between the two reads.
      throw new StaleSnapshot('the chain head');
    }
    return { state: { meta: before.json<Meta>(), seq: open.base }, open };
  }

  /** One unit of progress towards `target`; returns the state afterwards. */
  async #step(target: number): Promise<AppliedState> {
    const [{ state, open }, head] = await Promise.all([
      this.#readHead(),
      this.#io.lastSeq(this.#layout.logStream),
    ]);
    this.#seen(state, head);
    if (open) return (await this.#continue(state, open)) ?? (await this.#readHead()).state;
    if (state.meta.applied >= target) return state;
    const last = Math.min(head, state.meta.applied + ENTRIES_PER_PLAN);
    if (last <= state.meta.applied) return state;
    const loaded = await this.#load(state.meta.applied + 1, last);
    // Keep a plan's entries within a memory budget (at least one entry, however large).
    let bytes = 0;
    let count = 0;
    while (count < loaded.length && (count === 0 || bytes + (loaded[count]?.bytes ?? 0) <= PLAN_ENTRY_BYTES))
      bytes += loaded[count++]?.bytes ?? 0;
    const entries = loaded.slice(0, count);
    const to = state.meta.applied + count;
    // Claim the next chain position; plan meanwhile (planning only reads). A process losing the claim
    // loses one round trip and its reads, never a write.
    const header: PlanHeader = {
      v: 1,
      planner: PLANNER_VERSION,
      from: state.meta.applied + 1,
      to,
      base: state.seq,
    };
    await this.#options.hooks?.beforeWrite?.(0, header, undefined);
    const claim = headerWrite(this.#layout, header);
    const snapshot = new Snapshot(this.#io, this.#layout, state.meta, state.seq, this.#cache);
    const [landed, planned] = await Promise.allSettled([
      this.#io.publish(claim.subject, claim.data, { expectLastSeq: state.seq, headers: claim.headers }),
      plan(snapshot, header, entries),
    ]);
    if (landed.status === 'rejected') throw landed.reason;
    if (landed.value === 'conflict') return state; // another process opened a plan first
    this.#ownBase = state.seq;
    if (planned.status === 'rejected') throw planned.reason; // the next step finishes our own plan
    return (await this.#write(planned.value, entries, 1, true)) ?? (await this.#readHead()).state;
  }

  /** A plan is open at `state.seq`: wait for its owner, or finish it. Returns the state when it knows it. */
  async #continue(state: AppliedState, header: PlanHeader): Promise<AppliedState | undefined> {
    if (header.planner !== PLANNER_VERSION)
      throw new NotSupportedError(
        `a plan in stream ${this.#layout.stateStream} was started by planner version ${header.planner}; this process runs ${PLANNER_VERSION} and cannot finish it (upgrade every process)`,
      );
    if (this.#ownBase !== state.seq && (await this.#progressed(state.seq))) return undefined;
    const entries = await this.#load(header.from, header.to);
    const planned = await plan(
      new Snapshot(this.#io, this.#layout, state.meta, state.seq, this.#cache),
      header,
      entries,
    );
    const last = await this.#io.lastSeq(this.#layout.stateStream);
    this.#ownBase = state.seq;
    // Written by us or by the owner: either way this computation is the plan, unless it already completed
    // (then its clean-up may have changed what this computation read, and only the abort records count).
    return this.#write(planned, entries, last - state.seq, last < state.seq + planned.writes.length);
  }

  /** Waits while another process writes the plan at `base`; false when it stalled. */
  async #progressed(base: number): Promise<boolean> {
    let last = await this.#io.lastSeq(this.#layout.stateStream);
    let since = performance.now();
    for (;;) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, 25);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.#poke = done;
      });
      this.#poke = undefined;
      if (this.#closed) throw new ClosedError('nats backend');
      const now = await this.#io.lastSeq(this.#layout.stateStream);
      const head = await this.#io.last(this.#layout.stateStream, this.#layout.head);
      if (head?.header(KIND_HEADER) === 'meta' && head.seq > base) return true;
      if (now !== last) {
        last = now;
        since = performance.now();
      } else if (performance.now() - since >= this.#options.stallMs) {
        this.#options.logger.warn('a plan stalled; finishing it', { stream: this.#layout.stateStream, base });
        return false;
      }
    }
  }

  /**
   * Sends chained writes `from..end` of `planned` back to back, then cleans up if the plan is complete.
   * `current`: the plan was computed from the state it applies to, so its outcomes can be remembered.
   */
  async #write(
    planned: Plan,
    entries: LoggedEntry[],
    from: number,
    current: boolean,
  ): Promise<AppliedState | undefined> {
    const base = planned.header.base;
    const sends: Promise<PublishResult>[] = [];
    for (let i = Math.max(from, 0); i < planned.writes.length; i++) {
      // A window of writes in flight (each names its own position, so order on the wire is all it needs).
      if (sends.length >= WRITE_WINDOW) await sends[sends.length - WRITE_WINDOW]?.catch(() => {});
      await this.#options.hooks?.beforeWrite?.(i, planned.header, planned.writes.length);
      const write = planned.writes[i] as Plan['writes'][number];
      sends.push(
        this.#io.publish(write.subject, write.data, { expectLastSeq: base + i, headers: write.headers }),
      );
    }
    const results = await Promise.allSettled(sends);
    const complete = base + planned.writes.length;
    const last = results.at(-1);
    // The meta record (the last write) landed at its position: the plan is complete.
    let done = last?.status === 'fulfilled' && last.value !== 'conflict' && last.value.seq === complete;
    if (!done) {
      const head = await this.#io.last(this.#layout.stateStream, this.#layout.head);
      done = head?.seq === complete;
    }
    if (!done) {
      const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failure) throw failure.reason;
      return undefined; // positions taken by another process finishing the same plan; look again
    }
    if (current) {
      for (const [seq, outcome] of planned.outcomes) this.#remember(seq, outcome);
      for (const [seq, { node, bytes }] of planned.nodes) this.#cache.set(seq, node, bytes);
    }
    this.#collect(planned, entries);
    return current ? { meta: planned.meta, seq: complete } : undefined;
  }

  #remember(seq: number, outcome: AbortValue | undefined): void {
    this.#outcomes.set(seq, outcome);
    if (this.#outcomes.size > 10_000) {
      const oldest = this.#outcomes.keys().next().value;
      if (oldest !== undefined) this.#outcomes.delete(oldest);
    }
  }

  /**
   * Removes what the completed plan made unreachable: replaced index nodes, tombstones, evicted abort
   * records, applied log entries. Best effort, in the background, one plan's worth at a time; a crash
   * here leaves garbage behind, never a wrong state.
   */
  #collect(planned: Plan, entries: LoggedEntry[]): void {
    const io = this.#io;
    const layout = this.#layout;
    const jobs: (() => Promise<unknown>)[] = planned.garbage.map(
      (g) => () =>
        io.purge(layout.stateStream, {
          filter: g.subject,
          ...(g.before !== undefined ? { before: g.before } : {}),
        }),
    );
    for (const e of entries)
      if (e.entry?.parts) {
        const tx = e.entry.tx;
        jobs.push(() => io.purge(layout.logStream, { filter: `${layout.logPart}.${tx}.>` }));
      }
    // Applied commits leave the log in batches (the anchor keeps the stream from ever being empty).
    const applied = planned.meta.applied;
    if (applied - this.#trimmed >= TRIM_EVERY) {
      this.#trimmed = applied;
      jobs.push(() => io.purge(layout.logStream, { filter: layout.logCommit, before: applied + 1 }));
    }
    this.#cleanup = this.#cleanup.then(async () => {
      for (let i = 0; i < jobs.length; i += 32) {
        const results = await Promise.allSettled(jobs.slice(i, i + 32).map((job) => job()));
        const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        if (failed) {
          this.#options.logger.debug('cleanup after a plan failed; garbage stays', { error: failed.reason });
          return;
        }
      }
    });
  }

  /** Reads log entries `from..to` (inclusive). */
  async #load(from: number, to: number): Promise<LoggedEntry[]> {
    const seqs = Array.from({ length: to - from + 1 }, (_, i) => from + i);
    return Promise.all(seqs.map((seq) => this.#loadOne(seq)));
  }

  async #loadOne(seq: number): Promise<LoggedEntry> {
    const m = await this.#io.at(this.#layout.logStream, seq);
    if (!m || m.subject !== this.#layout.logCommit)
      return { seq, time: m?.time ?? 0, bytes: 0, entry: undefined };
    let entry: Entry;
    try {
      entry = m.json<Entry>();
    } catch {
      return { seq, time: m.time, bytes: 0, entry: undefined };
    }
    if (entry.parts) {
      const tx = entry.tx;
      const parts = await Promise.all(
        Array.from({ length: entry.parts }, (_, i) =>
          this.#io.last(this.#layout.logStream, `${this.#layout.logPart}.${tx}.${i}`),
        ),
      );
      if (parts.some((p) => p === undefined))
        return {
          seq,
          time: m.time,
          bytes: 0,
          entry: { ...entry, ops: [], broken: 'a part of the transaction is missing' },
        };
      const body = Buffer.concat(parts.map((p) => Buffer.from((p as StoredMessage).data)));
      try {
        const whole = JSON.parse(body.toString('utf8')) as Pick<Entry, 'ops' | 'reads'>;
        entry = { ...entry, ops: whole.ops, ...(whole.reads ? { reads: whole.reads } : {}) };
      } catch {
        return {
          seq,
          time: m.time,
          bytes: 0,
          entry: { ...entry, ops: [], broken: 'the transaction parts are not readable' },
        };
      }
      return { seq, time: m.time, bytes: body.length, entry };
    }
    return { seq, time: m.time, bytes: m.data.length, entry };
  }
}
