import { CorruptDataError } from '@duetime/core';
import type { NatsIo, StoredMessage } from '../io.js';
import type { Layout } from '../layout.js';
import type { NodeReader, NodeRef, TreeNode } from './btree.js';
import type { AggregateHead, Meta, RecordValue } from './types.js';

/** Header naming the sequence of the value a chained write replaced (0: there was none). */
export const PREV_HEADER = 'Duetime-Prev';
/** Header telling a plan header (`plan`) from a meta record (`meta`) on the chain's head subject. */
export const KIND_HEADER = 'Duetime-Kind';
/** Header marking a tombstone: the subject's value was deleted. */
export const DELETED_HEADER = 'Duetime-Deleted';

/**
 * The state moved on while a snapshot was being read (an old index node or value was already removed).
 * Readers start again from a fresh snapshot.
 */
export class StaleSnapshot extends Error {
  constructor(what: string) {
    super(`snapshot moved on while reading ${what}`);
  }
}

/** A subject's value as of a chain position. */
export interface Versioned<T> {
  /** Sequence of the message holding it (0: absent). */
  seq: number;
  value: T | undefined;
}

/**
 * Index node versions by message sequence. A version never changes, so the cache never needs
 * invalidating; it only forgets.
 */
export class NodeCache {
  readonly #nodes = new Map<number, { node: TreeNode; bytes: number }>();
  readonly #limit: number;
  #bytes = 0;

  /** `limitBytes`: the serialised size of the nodes kept, at most. */
  constructor(limitBytes = 32 * 1024 * 1024) {
    this.#limit = limitBytes;
  }

  get(seq: number): TreeNode | undefined {
    const entry = this.#nodes.get(seq);
    if (entry) {
      this.#nodes.delete(seq);
      this.#nodes.set(seq, entry);
    }
    return entry?.node;
  }

  set(seq: number, node: TreeNode, bytes: number): void {
    if (this.#nodes.has(seq) || bytes > this.#limit) return;
    this.#nodes.set(seq, { node, bytes });
    this.#bytes += bytes;
    for (const [oldest, entry] of this.#nodes) {
      if (this.#bytes <= this.#limit) break;
      this.#nodes.delete(oldest);
      this.#bytes -= entry.bytes;
    }
  }
}

/**
 * Committed state as of one chain position (`bound`, the sequence of a meta record). Reads of a subject
 * written after the bound follow the `Duetime-Prev` header back to the value the bound saw; streams keep
 * two values per subject and every plan writes a subject at most once, so that value is there unless a
 * later plan already replaced it too, which makes the snapshot stale.
 */
export class Snapshot implements NodeReader {
  readonly io: NatsIo;
  readonly layout: Layout;
  readonly meta: Meta;
  readonly bound: number;
  readonly #cache: NodeCache;

  constructor(io: NatsIo, layout: Layout, meta: Meta, bound: number, cache: NodeCache) {
    this.io = io;
    this.layout = layout;
    this.meta = meta;
    this.bound = bound;
    this.#cache = cache;
  }

  roots(): Meta['roots'] {
    return this.meta.roots;
  }

  /** The value of `subject` at the bound. */
  async read<T>(subject: string): Promise<Versioned<T>> {
    let m: StoredMessage | undefined = await this.io.last(this.layout.stateStream, subject);
    while (m && m.seq > this.bound) {
      const prev = Number(m.header(PREV_HEADER) ?? '0');
      if (!Number.isSafeInteger(prev) || prev < 0)
        throw new CorruptDataError(`message ${m.seq} on ${subject} has an unreadable ${PREV_HEADER} header`);
      if (prev === 0) return { seq: 0, value: undefined };
      m = await this.io.at(this.layout.stateStream, prev);
      if (!m || m.subject !== subject) throw new StaleSnapshot(subject);
    }
    if (!m || m.header(DELETED_HEADER) !== undefined) return { seq: m?.seq ?? 0, value: undefined };
    try {
      return { seq: m.seq, value: m.json<T>() };
    } catch (error) {
      throw new CorruptDataError(`message ${m.seq} on ${subject} is not JSON`, { cause: error });
    }
  }

  async node(ref: NodeRef): Promise<TreeNode> {
    const [slot, seq] = ref;
    const cached = this.#cache.get(seq);
    if (cached) return cached;
    const m = await this.io.at(this.layout.stateStream, seq);
    // Gone: replaced twice since this snapshot (two versions per slot are kept), or its slot was dropped.
    if (!m || m.subject !== this.layout.node(slot)) throw new StaleSnapshot(`index node ${slot}@${seq}`);
    const node = m.json<TreeNode>();
    this.#cache.set(seq, node, m.data.length);
    return node;
  }

  async record(key: string): Promise<RecordValue | undefined> {
    return (await this.read<RecordValue>(this.layout.record(key))).value;
  }

  async aggregate(id: string): Promise<AggregateHead | undefined> {
    return (await this.read<AggregateHead>(this.layout.aggregate(id))).value;
  }
}
