import type { ConflictKind, Event, Message } from '@duetime/core';
import type { Root } from './btree.js';

/**
 * The materialised state's root record, written last by every plan. `applied` is the last log sequence
 * whose transaction is reflected in the state; `seq` of the message holding it is the chain position
 * every read snapshot is bounded by.
 */
export interface Meta {
  v: 1;
  /** Last commit-log sequence applied (0: none). */
  applied: number;
  /** The store-wide version counter (the last version handed out). */
  version: number;
  /** Next index-node slot. */
  nextNode: number;
  /** Active schedules. */
  count: number;
  /** Roots of the three indexes: by due time, by deadline, by key. */
  roots: { due: Root; at: Root; key: Root };
  /** Log sequences of recent aborted transactions whose abort records still exist, oldest first. */
  aborts: number[];
  /** Aborts at or below this log sequence may have had their records removed. */
  abortFloor: number;
}

export function emptyMeta(): Meta {
  return {
    v: 1,
    applied: 0,
    version: 0,
    count: 0,
    nextNode: 1,
    roots: { due: null, at: null, key: null },
    aborts: [],
    abortFloor: 0,
  };
}

/** A schedule as stored (times in milliseconds). */
export interface RecordValue {
  key: string;
  at: number;
  message: Message;
  version: number;
  attempts: number;
  dueAt: number;
}

/** An aggregate's head: its last event sequence. */
export interface AggregateHead {
  id: string;
  seq: number;
}

/** Why a logged transaction did not take effect. `stale`: a failure record for a replaced version. */
export interface AbortValue {
  kind: ConflictKind | 'stale';
  subject: string;
  message?: string;
}

/**
 * The header opening a plan: which log entries it covers. Publishing it claims the chain position; the
 * process whose header lands owns the plan.
 */
export interface PlanHeader {
  v: 1;
  /** Version of the planning rules; a process with other rules never continues this plan. */
  planner: number;
  from: number;
  to: number;
  /** Chain position before the header (the previous meta's sequence). */
  base: number;
}

/** One operation of a logged transaction (times in milliseconds). */
export type EntryOp =
  | { op: 'append'; id: string; expect: number; events: Event[] }
  | { op: 'put'; key: string; at: number; message: Message }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string }
  | { op: 'consume'; key: string; version: number }
  | { op: 'fail'; key: string; version: number; attempts: number; dueAt: number };

/** A query whose answer a transaction read, with the digest of what it saw. */
export interface ListRead {
  through?: number;
  prefix?: string;
  after?: { at: number; key: string };
  limit: number;
  digest: string;
}

/**
 * What a transaction read from committed state and relied on: schedule versions (0: absent), aggregate
 * sequences, and pages of listings. Checked at the transaction's place in the log.
 */
export interface EntryReads {
  s?: [string, number][];
  a?: [string, number][];
  l?: ListRead[];
}

/** One transaction in the commit log. */
export interface Entry {
  v: 1;
  /** Transaction id (also the message's `Nats-Msg-Id`). */
  tx: string;
  /** Wall-clock deadline (ms): a commit message stored by the server after it is void. */
  exp: number;
  ops: EntryOp[];
  reads?: EntryReads;
  /** Present when the transaction was too large for one message: the number of parts. */
  parts?: number;
  /** Set by the reader (never stored) when the entry cannot be read whole: why it is void. */
  broken?: string;
}

/** A log entry as the planner sees it. */
export interface LoggedEntry {
  seq: number;
  /** Server timestamp of the commit message (ms). */
  time: number;
  /** Size of the transaction as read (for the plan's memory budget). */
  bytes: number;
  /** Undefined for a log message that is not a (readable) transaction. */
  entry: Entry | undefined;
}
