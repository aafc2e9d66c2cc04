import { randomUUID } from 'node:crypto';
import { watch } from 'node:fs';
import type { Claimed, ClaimRequest, Clock, Settlement, StoreAdapter, Unit, Write } from '@duetime/core';
import { ConflictError, decodeDeadLetter, decodeEvent, decodeSchedule, isOneShot } from '@duetime/core';
import type { DataFile, State, StoredSchedule } from './data.js';
import { isAlive } from './lock.js';

/** A unit of work: a token naming its claims, and what it claimed. */
export interface FileUnit extends Unit<undefined> {
  readonly token: string;
  readonly claimed?: Claimed[];
}

/** (instant, key) order. */
const compare = (a: [string, number], b: [string, number]) =>
  a[1] - b[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);

/**
 * The store adapter, in the buffered style: core keeps a unit's writes and hands them all to `commit`,
 * which applies them in one change of the file. Claims are records in the file (token, pid, lapse time),
 * so they outlive their process: the next claim of a version whose claim was never settled reports it
 * `interrupted`, and core counts the crash.
 */
export function fileStore(file: DataFile, clock: Clock, lapseMs: number): StoreAdapter<undefined, FileUnit> {
  const where = file.path;
  const toSchedule = (key: string, s: StoredSchedule) => decodeSchedule({ key, ...s }, where);

  /**
   * Due schedules no live claim holds, in (due, key) order: unclaimed, claimed for another version, or
   * claimed for this version by a delivery that never settled it (its process died, or it stopped
   * renewing): those are `interrupted`.
   */
  const claimable = (state: State, { now, limit }: ClaimRequest) =>
    [...state.schedules]
      .filter(([, s]) => s.dueAt <= now.getTime())
      .sort(([a, x], [b, y]) => compare([a, x.dueAt], [b, y.dueAt]))
      .flatMap(([key, s]): [string, StoredSchedule, boolean][] => {
        const held = state.claims.get(key);
        if (held?.version !== s.version) return [[key, s, false]];
        return held.until <= clock.now() || !isAlive(held.pid) ? [[key, s, true]] : [];
      })
      .slice(0, limit);

  const release = (state: State, unit: FileUnit) => {
    for (const { key } of unit.claimed ?? [])
      if (state.claims.get(key)?.token === unit.token) state.claims.delete(key);
  };

  /** Puts a new version under the key; returns true (it scheduled something). */
  const put = (state: State, w: Omit<Extract<Write, { op: 'put' }>, 'op'>): true => {
    const { key, at, dueAt = at, message, recurrence } = w;
    const stored: StoredSchedule = { at: +at, dueAt: +dueAt, message, version: ++state.version, attempts: 0 };
    state.schedules.set(key, recurrence ? { ...stored, recurrence } : stored);
    return true;
  };

  /** Applies writes in order (their conflicts checked already); returns whether any put a schedule. */
  const apply = (state: State, writes: readonly Write[]) => {
    let scheduled = false;
    for (const w of writes) {
      if (w.op === 'put') scheduled = put(state, w);
      else if (w.op === 'delete') state.schedules.delete(w.key);
      else if (w.op === 'deleteDead') state.dead.delete(w.key);
      else if (w.op === 'deletePrefix') {
        for (const key of [...state.schedules.keys()])
          if (key.startsWith(w.prefix)) state.schedules.delete(key);
      } else state.events.set(w.aggregateId, [...(state.events.get(w.aggregateId) ?? []), ...w.events]);
    }
    return scheduled;
  };

  /** Applies one settlement of a claim the unit still holds; returns whether it scheduled anything. */
  const settle = (state: State, s: Settlement): boolean => {
    const { key, version, at, message } = s.schedule;
    if (s.outcome === 'release') return false;
    if (s.outcome === 'retry') {
      const { attempts, dueAt, error: lastError, at: moved } = s.failure!;
      const current = state.schedules.get(key)!;
      state.schedules.set(key, {
        ...current,
        attempts,
        lastError,
        dueAt: +dueAt,
        at: +(moved ?? current.at),
      });
      return true;
    }
    state.schedules.delete(key);
    if (s.dead) state.dead.set(key, { ...s.dead, key, version, message, at: +at, deadAt: +s.dead.deadAt });
    const scheduled = apply(state, s.writes);
    if (!s.next || state.schedules.has(key)) return scheduled;
    return put(state, { key, message, ...s.next });
  };

  return {
    renewEveryMs: Math.max(1, Math.floor(lapseMs / 3)),

    async begin(claim) {
      const token = randomUUID();
      if (!claim) return { token };
      // Most looks find nothing to claim: those are answered without the lock.
      if (claimable(await file.read(), claim).length === 0) return { token, claimed: [] };
      const claimed = await file.update((state) => {
        const until = clock.now() + lapseMs;
        return claimable(state, claim).map(([key, stored, interrupted]) => {
          state.claims.set(key, { version: stored.version, token, pid: process.pid, until });
          const schedule: Claimed = toSchedule(key, stored);
          if (interrupted) schedule.interrupted = true;
          return schedule;
        });
      });
      return { token, claimed };
    },

    /**
     * A plain transaction's writes apply together or, on a conflict, not at all (thrown). Each settlement
     * applies with its writes, or is left out with its conflict, checked before anything of it applies.
     */
    async commit(unit, { writes, settlements }) {
      const rejected = new Map<string, Error>();
      const scheduled = await file.update((state) => {
        const conflict = conflictOf(state, writes);
        if (conflict) throw conflict;
        let scheduled = apply(state, writes);
        for (const s of settlements) {
          const { key, version } = s.schedule;
          const ours =
            state.claims.get(key)?.token === unit.token && state.schedules.get(key)?.version === version;
          const conflict = ours ? conflictOf(state, s.writes) : new ConflictError('schedule', key);
          if (s.outcome === 'consume' && conflict) rejected.set(key, conflict);
          else if (ours) scheduled = settle(state, s) || scheduled;
        }
        release(state, unit);
        return scheduled;
      });
      if (scheduled) await file.signal();
      return rejected;
    },

    async rollback(unit) {
      if (unit.claimed?.length) await file.update((state) => release(state, unit));
    },

    async renew(unit) {
      await file.update((state) => {
        for (const { key } of unit.claimed ?? []) {
          const held = state.claims.get(key);
          if (held?.token === unit.token) state.claims.set(key, { ...held, until: clock.now() + lapseMs });
        }
      });
    },

    async loadSchedule(key) {
      const stored = (await file.read()).schedules.get(key);
      return stored && toSchedule(key, stored);
    },

    async loadEvents(aggregateId) {
      const stream = (await file.read()).events.get(aggregateId) ?? [];
      return stream.map((event) => decodeEvent(aggregateId, event, where));
    },

    async listSchedules(q) {
      const bound = (s: StoredSchedule) => (q.order === 'due' ? s.dueAt : s.at);
      const position = (s: StoredSchedule) => (q.order === 'key' ? 0 : bound(s));
      const after = q.after && ([q.after.key, q.order === 'key' ? 0 : q.after.at] as [string, number]);
      return [...(await file.read()).schedules]
        .filter(
          ([key, s]) =>
            (q.through === undefined || bound(s) <= +q.through) &&
            (q.prefix === undefined || key.startsWith(q.prefix)) &&
            (q.recurring === undefined || (!!s.recurrence && !isOneShot(s.recurrence)) === q.recurring) &&
            (after === undefined || compare([key, position(s)], after) > 0),
        )
        .sort(([a, x], [b, y]) => compare([a, position(x)], [b, position(y)]))
        .slice(0, q.limit)
        .map(([key, s]) => toSchedule(key, s));
    },

    async listDeadLetters(q) {
      return [...(await file.read()).dead]
        .filter(([key]) => key.startsWith(q.prefix ?? '') && (q.after === undefined || key > q.after))
        .sort(([a], [b]) => compare([a, 0], [b, 0]))
        .slice(0, q.limit)
        .map(([, letter]) => decodeDeadLetter(letter, where));
    },

    /**
     * The push channel: the directory is watched (inotify on Linux) for `changed`, which every commit that
     * schedules something rewrites, in whichever process it ran (see `signal` in data.ts).
     */
    watch(listener) {
      const watcher = watch(file.dir, { persistent: false }, (_event, name) => {
        if (name === 'changed') listener({ type: 'change' });
      });
      watcher.on('error', () => listener({ type: 'lost' }));
      queueMicrotask(() => listener({ type: 'live' }));
      return () => watcher.close();
    },
  };
}

/**
 * The conflict applying `writes` in order would meet, found before any is applied: an append whose
 * stream moved on is the only write that can fail.
 */
function conflictOf(state: State, writes: readonly Write[]): ConflictError | undefined {
  const lengths = new Map<string, number>();
  for (const w of writes) {
    if (w.op !== 'append') continue;
    const length = lengths.get(w.aggregateId) ?? state.events.get(w.aggregateId)?.length ?? 0;
    if (length !== w.expectedSequence) return new ConflictError('aggregate', w.aggregateId);
    lengths.set(w.aggregateId, length + w.events.length);
  }
  return undefined;
}
