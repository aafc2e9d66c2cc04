import type { Layout } from '../layout.js';
import {
  byKey,
  byTime,
  type NodeRef,
  type NodeWriter,
  type Root,
  remove,
  scan,
  type TreeNode,
  upsert,
} from './btree.js';
import { listingDigest, listSchedules, type StateView } from './queries.js';
import { DELETED_HEADER, KIND_HEADER, PREV_HEADER, type Snapshot, type Versioned } from './snapshot.js';
import type {
  AbortValue,
  AggregateHead,
  Entry,
  EntryOp,
  LoggedEntry,
  Meta,
  PlanHeader,
  RecordValue,
} from './types.js';

/**
 * Version of the rules below. Every process continuing a plan must compute byte-identical writes, so a
 * change to planning that alters any write bumps this number (a process refuses to continue a plan
 * started under another version).
 */
export const PLANNER_VERSION = 1;
/** How many abort records are kept for committers to read their outcome. */
const ABORT_RING = 512;

/** One chained message of a plan. */
export interface PlannedWrite {
  subject: string;
  data: string;
  headers: Record<string, string>;
}

/** Something to purge once the plan is complete: a subject, below a sequence when given. */
export interface Garbage {
  subject: string;
  before?: number;
}

export interface Plan {
  header: PlanHeader;
  /** Index node versions the plan writes, by the sequence each lands at, with their size. */
  nodes: ReadonlyMap<number, { node: TreeNode; bytes: number }>;
  /** Header first, meta last; write `i` lands at chain position `header.base + 1 + i`. */
  writes: PlannedWrite[];
  meta: Meta;
  /** Per planned log sequence: why it did not take effect, or undefined when it committed. */
  outcomes: Map<number, AbortValue | undefined>;
  garbage: Garbage[];
}

interface Pending {
  value: unknown;
  /** 0: written early (events, index nodes, abort records); 1: records and heads; readers follow them. */
  phase: 0 | 1;
  prev: number;
}

/**
 * Decides and plans the log entries `entries` (consecutive, starting right after `base.meta.applied`)
 * against the committed state `base`. Deterministic: the same base and entries always give the same
 * plan, which is what lets any process finish a plan another one started.
 *
 * Each entry is first validated against the state left by the entries before it (its deadline, the
 * preconditions of its operations, and everything it read); a valid entry is applied, an invalid one
 * leaves only an abort record. Entries are thus executed one at a time in log order.
 */
export async function plan(base: Snapshot, header: PlanHeader, entries: LoggedEntry[]): Promise<Plan> {
  const builder = new PlanBuilder(base);
  builder.prefetch(entries);
  for (const logged of entries) await builder.entry(logged);
  if (process.env.DUETIME_NATS_CHECK === '1') await builder.check();
  return builder.finish(header);
}

/** The message that opens a plan (index 0 of its writes). */
export function headerWrite(layout: Layout, header: PlanHeader): PlannedWrite {
  return { subject: layout.head, data: JSON.stringify(header), headers: { [KIND_HEADER]: 'plan' } };
}

class PlanBuilder implements StateView, NodeWriter {
  readonly #base: Snapshot;
  readonly meta: Meta;
  readonly #pending = new Map<string, Pending>();
  readonly #baseValues = new Map<string, Promise<Versioned<unknown>>>();
  /** Node slots this plan writes, with their new contents (children written by it have sequence 0). */
  readonly #nodes = new Map<number, TreeNode>();
  /** Slots that held nodes before this plan and left the tree. */
  readonly #dropped: number[] = [];
  readonly #firstNewSlot: number;
  readonly #outcomes = new Map<number, AbortValue | undefined>();
  readonly #evictedAborts: number[] = [];

  constructor(base: Snapshot) {
    this.#base = base;
    this.meta = structuredClone(base.meta);
    this.#firstNewSlot = this.meta.nextNode;
  }

  // ---- StateView / NodeWriter ----------------------------------------------------------------------

  roots(): Meta['roots'] {
    return this.meta.roots;
  }

  async node(ref: NodeRef): Promise<TreeNode> {
    if (ref[1] !== 0) return this.#base.node(ref);
    const node = this.#nodes.get(ref[0]);
    if (!node) throw new Error(`index node slot ${ref[0]} is not written by this plan`);
    return node;
  }

  alloc(): NodeRef {
    return [this.meta.nextNode++, 0];
  }

  write(ref: NodeRef, node: TreeNode): NodeRef {
    this.#nodes.set(ref[0], node);
    return [ref[0], 0];
  }

  drop(ref: NodeRef): void {
    this.#nodes.delete(ref[0]);
    if (ref[0] < this.#firstNewSlot) this.#dropped.push(ref[0]);
  }

  async record(key: string): Promise<RecordValue | undefined> {
    return this.#get<RecordValue>(this.#base.layout.record(key));
  }

  // ---- values --------------------------------------------------------------------------------------

  async #baseValue<T>(subject: string): Promise<Versioned<T>> {
    let read = this.#baseValues.get(subject);
    if (!read) {
      read = this.#base.read(subject);
      this.#baseValues.set(subject, read);
    }
    return read as Promise<Versioned<T>>;
  }

  async #get<T>(subject: string): Promise<T | undefined> {
    const pending = this.#pending.get(subject);
    if (pending) return (pending.value ?? undefined) as T | undefined;
    return (await this.#baseValue<T>(subject)).value;
  }

  /** Sets a value read before (its previous sequence is known); `null` deletes it. */
  async #set(subject: string, value: unknown, phase: 0 | 1): Promise<void> {
    const before = await this.#baseValue(subject);
    this.#pending.set(subject, { value, phase, prev: before.value === undefined ? 0 : before.seq });
  }

  /** Sets a subject that is written once and never read back by planning (events, abort records). */
  #setNew(subject: string, value: unknown): void {
    this.#pending.set(subject, { value, phase: 0, prev: 0 });
  }

  /**
   * Starts reading, in parallel, every record and aggregate head the entries name, so that planning
   * (which must run one step at a time to stay deterministic) mostly finds them already read.
   */
  prefetch(entries: LoggedEntry[]): void {
    const layout = this.#base.layout;
    const subjects = new Set<string>();
    for (const { entry } of entries) {
      for (const op of entry?.ops ?? []) {
        if (op.op === 'append') subjects.add(layout.aggregate(op.id));
        else if (op.op !== 'deletePrefix') subjects.add(layout.record(op.key));
      }
      for (const [key] of entry?.reads?.s ?? []) subjects.add(layout.record(key));
      for (const [id] of entry?.reads?.a ?? []) subjects.add(layout.aggregate(id));
    }
    for (const subject of subjects) this.#baseValue(subject).catch(() => {});
  }

  // ---- entries -------------------------------------------------------------------------------------

  async entry(logged: LoggedEntry): Promise<void> {
    const entry = logged.entry;
    if (!entry) return; // not a transaction (a part of a large one, or unreadable): nothing to apply
    const abort = await this.#validate(entry, logged.time);
    this.#outcomes.set(logged.seq, abort);
    if (abort) {
      this.#setNew(this.#base.layout.abort(logged.seq), abort);
      this.meta.aborts.push(logged.seq);
      while (this.meta.aborts.length > ABORT_RING) {
        const evicted = this.meta.aborts.shift() as number;
        this.#evictedAborts.push(evicted);
        this.meta.abortFloor = Math.max(this.meta.abortFloor, evicted);
      }
      return;
    }
    for (const op of entry.ops) await this.#apply(op);
  }

  /** Checks an entry against the state before it; returns why it cannot commit, if it cannot. */
  async #validate(entry: Entry, time: number): Promise<AbortValue | undefined> {
    if (entry.broken !== undefined)
      return { kind: 'serialization', subject: `transaction ${entry.tx}`, message: entry.broken };
    if (!(entry.exp >= time))
      return {
        kind: 'serialization',
        subject: `transaction ${entry.tx}`,
        message: 'the commit reached the log after its deadline (a delayed retry); it was not applied',
      };
    const sequences = new Map<string, number>();
    const versions = new Map<string, number>();
    const deletedPrefixes: string[] = [];
    const versionOf = async (key: string) => {
      const staged = versions.get(key);
      if (staged !== undefined) return staged;
      if (deletedPrefixes.some((p) => key.startsWith(p))) return 0;
      return (await this.record(key))?.version ?? 0;
    };
    for (const op of entry.ops) {
      switch (op.op) {
        case 'append': {
          const current =
            sequences.get(op.id) ??
            (await this.#get<AggregateHead>(this.#base.layout.aggregate(op.id)))?.seq ??
            0;
          if (current !== op.expect) return { kind: 'aggregate', subject: op.id };
          if (op.events.some((e, i) => e.sequence !== op.expect + i + 1))
            return {
              kind: 'serialization',
              subject: op.id,
              message: 'event sequences do not continue the stream',
            };
          sequences.set(op.id, op.expect + op.events.length);
          break;
        }
        case 'put':
          versions.set(op.key, -1);
          break;
        case 'delete':
          versions.set(op.key, 0);
          break;
        case 'deletePrefix':
          for (const key of [...versions.keys()]) if (key.startsWith(op.prefix)) versions.delete(key);
          deletedPrefixes.push(op.prefix);
          break;
        case 'consume':
          if ((await versionOf(op.key)) !== op.version) return { kind: 'schedule', subject: op.key };
          versions.set(op.key, 0);
          break;
        case 'fail':
          if ((await versionOf(op.key)) !== op.version) return { kind: 'stale', subject: op.key };
          break;
      }
    }
    const reads = entry.reads;
    for (const [key, version] of reads?.s ?? []) {
      if (((await this.record(key))?.version ?? 0) !== version)
        return {
          kind: 'serialization',
          subject: `schedule ${JSON.stringify(key)}`,
          message: 'it changed after the transaction read it',
        };
    }
    for (const [id, seq] of reads?.a ?? []) {
      const head = await this.#get<AggregateHead>(this.#base.layout.aggregate(id));
      if ((head?.seq ?? 0) !== seq)
        return {
          kind: 'serialization',
          subject: `aggregate ${JSON.stringify(id)}`,
          message: 'it changed after the transaction read it',
        };
    }
    for (const read of reads?.l ?? []) {
      const { digest, ...query } = read;
      if (listingDigest(await listSchedules(this, query)) !== digest)
        return {
          kind: 'serialization',
          subject: `listing ${JSON.stringify(query)}`,
          message: 'its result changed after the transaction read it',
        };
    }
    return undefined;
  }

  async #apply(op: EntryOp): Promise<void> {
    const layout = this.#base.layout;
    switch (op.op) {
      case 'append': {
        for (const event of op.events) this.#setNew(layout.event(op.id, event.sequence), event);
        await this.#set(layout.aggregate(op.id), { id: op.id, seq: op.expect + op.events.length }, 1);
        return;
      }
      case 'put': {
        const old = await this.record(op.key);
        const roots = this.meta.roots;
        if (old) {
          roots.due = await remove(roots.due, [old.dueAt, op.key], byTime, this);
          roots.at = await remove(roots.at, [old.at, op.key], byTime, this);
        } else this.meta.count++;
        roots.due = await upsert(roots.due, [op.at, op.key], byTime, this);
        roots.at = await upsert(roots.at, [op.at, op.key], byTime, this);
        roots.key = await upsert(roots.key, [op.at, op.key], byKey, this);
        this.meta.version++;
        const value: RecordValue = {
          key: op.key,
          at: op.at,
          message: op.message,
          version: this.meta.version,
          attempts: 0,
          dueAt: op.at,
        };
        await this.#set(layout.record(op.key), value, 1);
        return;
      }
      case 'delete':
      case 'consume':
        await this.#delete(op.key);
        return;
      case 'deletePrefix':
        await this.#deletePrefix(op.prefix);
        return;
      case 'fail': {
        const old = await this.record(op.key);
        if (!old) return;
        const roots = this.meta.roots;
        roots.due = await remove(roots.due, [old.dueAt, op.key], byTime, this);
        roots.due = await upsert(roots.due, [op.dueAt, op.key], byTime, this);
        await this.#set(layout.record(op.key), { ...old, attempts: op.attempts, dueAt: op.dueAt }, 1);
        return;
      }
    }
  }

  async #deletePrefix(prefix: string): Promise<void> {
    for (;;) {
      const keys: string[] = [];
      for await (const item of scan(this.meta.roots.key, [0, prefix], byKey, this)) {
        if (!item[1].startsWith(prefix) || keys.length >= 256) break;
        keys.push(item[1]);
      }
      if (keys.length === 0) return;
      for (const key of keys) await this.#delete(key);
    }
  }

  async #delete(key: string): Promise<void> {
    const old = await this.record(key);
    if (!old) return;
    const roots = this.meta.roots;
    roots.due = await remove(roots.due, [old.dueAt, key], byTime, this);
    roots.at = await remove(roots.at, [old.at, key], byTime, this);
    roots.key = await remove(roots.key, [old.at, key], byKey, this);
    this.meta.count--;
    await this.#set(this.#base.layout.record(key), null, 1);
  }

  /** Debugging aid: the three indexes hold exactly `meta.count` items. */
  async check(): Promise<void> {
    const counts: number[] = [];
    for (const [root, cmp] of [
      [this.meta.roots.due, byTime],
      [this.meta.roots.at, byTime],
      [this.meta.roots.key, byKey],
    ] as const) {
      let n = 0;
      for await (const _ of scan(root, undefined, cmp, this)) n++;
      counts.push(n);
    }
    if (counts.some((c) => c !== this.meta.count))
      throw new Error(
        `index check failed at ${this.#base.bound}: counts ${counts} vs ${this.meta.count}, base ${JSON.stringify(this.#base.meta)}`,
      );
  }

  // ---- result --------------------------------------------------------------------------------------

  finish(header: PlanHeader): Plan {
    const layout = this.#base.layout;
    const base = this.#base.bound;
    this.meta.applied = header.to;
    const data: PlannedWrite[] = [];
    const tombstones = new Set<string>();
    // Node versions come first, so the sequence each lands at is known: base + 1 is the header.
    const landsAt = new Map<number, number>();
    for (const slot of this.#nodes.keys()) landsAt.set(slot, base + 2 + landsAt.size);
    const resolve = (ref: NodeRef): NodeRef => (ref[1] === 0 ? [ref[0], landsAt.get(ref[0]) as number] : ref);
    const nodes = new Map<number, { node: TreeNode; bytes: number }>();
    for (const [slot, node] of this.#nodes) {
      const written: TreeNode = node.l === 1 ? node : { l: 0, s: node.s, c: node.c.map(resolve) };
      const write = chained(layout.node(slot), written, 0);
      nodes.set(landsAt.get(slot) as number, { node: written, bytes: Buffer.byteLength(write.data) });
      data.push(write);
    }
    const root = (r: Root): Root => (r === null ? null : resolve(r));
    this.meta.roots = {
      due: root(this.meta.roots.due),
      at: root(this.meta.roots.at),
      key: root(this.meta.roots.key),
    };
    for (const phase of [0, 1] as const) {
      for (const [subject, pending] of this.#pending) {
        if (pending.phase !== phase) continue;
        if (pending.value === null) tombstones.add(subject);
        data.push(chained(subject, pending.value, pending.prev));
      }
    }
    const meta = chained(layout.head, this.meta, 0);
    meta.headers[KIND_HEADER] = 'meta';
    const writes = [headerWrite(layout, header), ...data, meta];
    const garbage: Garbage[] = [
      ...this.#dropped.map((slot) => ({ subject: layout.node(slot) })),
      ...this.#evictedAborts.map((seq) => ({ subject: layout.abort(seq) })),
    ];
    writes.forEach((write, index) => {
      if (tombstones.has(write.subject)) garbage.push({ subject: write.subject, before: base + 2 + index });
    });
    return { header, nodes, writes, meta: this.meta, outcomes: this.#outcomes, garbage };
  }
}

function chained(subject: string, value: unknown, prev: number): PlannedWrite {
  if (value === null)
    return { subject, data: '', headers: { [PREV_HEADER]: String(prev), [DELETED_HEADER]: '1' } };
  return { subject, data: JSON.stringify(value), headers: { [PREV_HEADER]: String(prev) } };
}
