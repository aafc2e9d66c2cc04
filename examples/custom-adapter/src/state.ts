import {
  ConflictError,
  type DeadLetterRecord,
  type Event,
  type Message,
  readRecurrence,
  type Schedule,
  type StoredRecurrence,
  type StoreOp,
} from '@duetime/core';
import type { Replica } from './journal.js';
import { TimeIndex } from './time-index.js';

/**
 * What the journal records: facts, never intentions. A transaction's `consume` is checked before it is
 * written and recorded as the `delete` it amounts to; a `put` carries the version it was given. Replaying
 * the records in order therefore rebuilds the same state in every process, without re-checking anything.
 */
export type JournalRecord =
  | { type: 'commit'; ops: Fact[] }
  | { type: 'lease'; key: string; owner: string; token: number; expiresAt: number }
  | { type: 'release'; key: string }
  | { type: 'cursor'; key: string; at: number; expiresAt: number };

export type Fact =
  | { op: 'append'; aggregateId: string; events: Event[] }
  | { op: 'put'; key: string; at: number; message: Message; version: number; recurrence?: StoredRecurrence }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string }
  /** A failed delivery attempt recorded on `key` when it is still at `version`. */
  | { op: 'fail'; key: string; version: number; attempts: number; dueAt: number; error: string; at?: number }
  | { op: 'dead'; record: StoredDeadLetter }
  | { op: 'deleteDead'; key: string };

/** A dead letter as the journal keeps it (instants as epoch milliseconds). */
export interface StoredDeadLetter extends Omit<DeadLetterRecord, 'at' | 'deadAt'> {
  at: number;
  deadAt: number;
}

export interface StoredSchedule {
  at: number;
  message: Message;
  version: number;
  attempts: number;
  dueAt: number;
  lastError?: string;
  recurrence?: StoredRecurrence;
}

export interface Lease {
  owner: string;
  token: number;
  expiresAt: number;
}

export interface Cursor {
  at: number;
  expiresAt: number;
}

/** The whole state as a compacted journal's first line. */
export interface Snapshot {
  version: number;
  schedules: [string, StoredSchedule][];
  events: [string, Event[]][];
  leases: [string, Lease][];
  tokens: [string, number][];
  cursors: [string, Cursor][];
  /** Absent in snapshots written before dead letters existed. */
  deadLetters?: [string, StoredDeadLetter][];
}

/**
 * One instance's copy of the data, rebuilt from the journal: schedules with two ordered indices (by due
 * time for the dispatcher, by deadline for listing), aggregates' events, leases with the last fencing
 * token issued per key, and cursors.
 */
export class State implements Replica<JournalRecord, Snapshot> {
  /** The store-wide version counter: the highest version ever given to a `put`. */
  version = 0;
  readonly schedules = new Map<string, StoredSchedule>();
  readonly events = new Map<string, Event[]>();
  readonly leases = new Map<string, Lease>();
  /** Kept after a lease is released or expires, so that tokens only grow. */
  readonly tokens = new Map<string, number>();
  readonly cursors = new Map<string, Cursor>();
  readonly deadLetters = new Map<string, StoredDeadLetter>();
  readonly byDue = new TimeIndex();
  readonly byAt = new TimeIndex();
  readonly #remotePuts = new Set<(earliest: number) => void>();

  restore(snapshot: Snapshot | undefined): void {
    this.version = snapshot?.version ?? 0;
    for (const [map, entries] of [
      [this.schedules, snapshot?.schedules],
      [this.events, snapshot?.events],
      [this.leases, snapshot?.leases],
      [this.tokens, snapshot?.tokens],
      [this.cursors, snapshot?.cursors],
      [this.deadLetters, snapshot?.deadLetters],
    ] as [Map<string, unknown>, [string, unknown][] | undefined][]) {
      map.clear();
      for (const [key, value] of entries ?? []) map.set(key, value);
    }
    const all = [...this.schedules];
    this.byDue.reset(all.map(([key, s]) => ({ time: s.dueAt, key })));
    this.byAt.reset(all.map(([key, s]) => ({ time: s.at, key })));
  }

  snapshot(): Snapshot {
    const now = Date.now();
    const live = <T extends { expiresAt: number }>(map: Map<string, T>) =>
      [...map].filter(([, value]) => value.expiresAt > now);
    return {
      version: this.version,
      schedules: [...this.schedules],
      events: [...this.events],
      leases: live(this.leases),
      tokens: [...this.tokens],
      cursors: live(this.cursors),
      deadLetters: [...this.deadLetters],
    };
  }

  apply(record: JournalRecord, remote: boolean): void {
    switch (record.type) {
      case 'commit': {
        let earliest: number | undefined;
        for (const fact of record.ops) {
          this.#applyFact(fact);
          if (fact.op === 'put' && (earliest === undefined || fact.at < earliest)) earliest = fact.at;
        }
        // Core tells this instance's listeners about its own commits; others' arrive here.
        if (remote && earliest !== undefined) for (const listener of this.#remotePuts) listener(earliest);
        break;
      }
      case 'lease':
        this.leases.set(record.key, {
          owner: record.owner,
          token: record.token,
          expiresAt: record.expiresAt,
        });
        this.tokens.set(record.key, Math.max(record.token, this.tokens.get(record.key) ?? 0));
        break;
      case 'release':
        this.leases.delete(record.key);
        break;
      case 'cursor':
        this.cursors.set(record.key, { at: record.at, expiresAt: record.expiresAt });
        break;
    }
  }

  /** Calls `listener` with the earliest new deadline whenever another instance's commit puts schedules. */
  onRemotePut(listener: (earliest: number) => void): () => void {
    this.#remotePuts.add(listener);
    return () => this.#remotePuts.delete(listener);
  }

  /**
   * Checks a buffered transaction's preconditions against this (caught-up, locked) state, in call order,
   * and returns the facts to record. Throws ConflictError `aggregate` when a stream moved on, `schedule`
   * when a consumed version is no longer the active one. Changes nothing.
   */
  resolve(ops: StoreOp[]): Fact[] {
    const lengths = new Map<string, number>();
    const versions = new Map<string, number | undefined>();
    const cleared: string[] = [];
    const versionOf = (key: string) =>
      versions.has(key)
        ? versions.get(key)
        : cleared.some((prefix) => key.startsWith(prefix))
          ? undefined
          : this.schedules.get(key)?.version;
    let version = this.version;
    const facts: Fact[] = [];
    for (const op of ops) {
      switch (op.op) {
        case 'append': {
          const length = lengths.get(op.aggregateId) ?? this.events.get(op.aggregateId)?.length ?? 0;
          if (length !== op.expectedSequence) throw new ConflictError('aggregate', op.aggregateId);
          lengths.set(op.aggregateId, length + op.events.length);
          facts.push({ op: 'append', aggregateId: op.aggregateId, events: op.events });
          break;
        }
        case 'put':
        case 'rearm': {
          // A recurrence's next occurrence never replaces a schedule written since it was claimed.
          if (op.op === 'rearm' && versionOf(op.key) !== undefined) break;
          version++;
          versions.set(op.key, version);
          const fact: Fact = { op: 'put', key: op.key, at: op.at.getTime(), message: op.message, version };
          if (op.recurrence) fact.recurrence = op.recurrence;
          facts.push(fact);
          break;
        }
        case 'dead':
          facts.push({
            op: 'dead',
            record: { ...op.record, at: op.record.at.getTime(), deadAt: op.record.deadAt.getTime() },
          });
          break;
        case 'deleteDead':
          facts.push({ op: 'deleteDead', key: op.key });
          break;
        case 'delete':
          versions.set(op.key, undefined);
          facts.push({ op: 'delete', key: op.key });
          break;
        case 'deletePrefix':
          for (const key of versions.keys()) if (key.startsWith(op.prefix)) versions.set(key, undefined);
          cleared.push(op.prefix);
          facts.push({ op: 'deletePrefix', prefix: op.prefix });
          break;
        case 'consume':
          if (versionOf(op.key) !== op.version) throw new ConflictError('schedule', op.key);
          versions.set(op.key, undefined);
          facts.push({ op: 'delete', key: op.key });
          break;
        case 'fail':
          // Never a conflict: applied only if the key is still at that version when replayed.
          facts.push({
            op: 'fail',
            key: op.key,
            version: op.version,
            attempts: op.attempts,
            dueAt: op.dueAt.getTime(),
            error: op.error,
            ...(op.at ? { at: op.at.getTime() } : {}),
          });
          break;
      }
    }
    return facts;
  }

  #applyFact(fact: Fact): void {
    switch (fact.op) {
      case 'append': {
        const stream = this.events.get(fact.aggregateId);
        if (stream) stream.push(...fact.events);
        else this.events.set(fact.aggregateId, [...fact.events]);
        break;
      }
      case 'put':
        this.version = Math.max(this.version, fact.version);
        this.#set(fact.key, {
          at: fact.at,
          message: fact.message,
          version: fact.version,
          attempts: 0,
          dueAt: fact.at,
          ...(fact.recurrence ? { recurrence: fact.recurrence } : {}),
        });
        break;
      case 'dead':
        this.deadLetters.set(fact.record.key, fact.record);
        break;
      case 'deleteDead':
        this.deadLetters.delete(fact.key);
        break;
      case 'delete':
        this.#set(fact.key, undefined);
        break;
      case 'deletePrefix':
        for (const key of [...this.schedules.keys()])
          if (key.startsWith(fact.prefix)) this.#set(key, undefined);
        break;
      case 'fail': {
        const s = this.schedules.get(fact.key);
        if (s?.version === fact.version)
          this.#set(fact.key, {
            ...s,
            attempts: fact.attempts,
            dueAt: fact.dueAt,
            lastError: fact.error,
            ...(fact.at !== undefined ? { at: fact.at } : {}),
          });
        break;
      }
    }
  }

  /** Replaces (or removes) a schedule, keeping both indices in step. */
  #set(key: string, next: StoredSchedule | undefined): void {
    const previous = this.schedules.get(key);
    if (previous) {
      this.byDue.remove(previous.dueAt, key);
      this.byAt.remove(previous.at, key);
    }
    if (next) {
      this.schedules.set(key, next);
      this.byDue.add(next.dueAt, key);
      this.byAt.add(next.at, key);
    } else {
      this.schedules.delete(key);
    }
  }
}

/** A schedule as the driver returns it: fresh objects the caller may keep. */
export function toSchedule(key: string, s: StoredSchedule): Schedule {
  const schedule: Schedule = {
    key,
    at: new Date(s.at),
    message: structuredClone(s.message),
    version: s.version,
    attempts: s.attempts,
    dueAt: new Date(s.dueAt),
  };
  if (s.lastError !== undefined) schedule.lastError = s.lastError;
  if (s.recurrence) schedule.recurrence = readRecurrence(structuredClone(s.recurrence), key);
  return schedule;
}

/** A dead letter as the driver returns it. */
export function toDeadLetter(d: StoredDeadLetter): DeadLetterRecord {
  return { ...structuredClone(d), at: new Date(d.at), deadAt: new Date(d.deadAt) };
}
