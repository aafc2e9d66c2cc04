import type { Logger, Schedule } from '@duetime/core';
import type { NatsIo, StoredMessage } from '../io.js';
import { bucketOf, bucketStart, type Layout } from '../layout.js';
import { indexMessages } from './commit.js';
import { insertSorted, pairId, safePairs } from './entries.js';
import type { Claim } from './plan.js';
import { type DuePair, toSchedule } from './records.js';

/**
 * The due index: "what is due by T, a page at a time" and "when is the next deadline", read from
 * subjects of the store stream, without holding pending schedules in memory.
 *
 * Layout. Every record a commit writes adds `[key, due]` to the subject of its due second,
 * `q.<hour>.<second>` (one message per second touched per commit, so a subject holds many), and marks the
 * hour on `h.<hour>` (one message per hour, rolled up). Listing the subjects that hold messages is
 * JetStream's own per-subject index (`STREAM.INFO` with `subjects_filter`): the hours first (one subject
 * per hour with pending work), then the seconds of the earliest hour (at most 3,600). A second's entries
 * are read in stream order with batch direct gets (`next_by_subj`).
 *
 * Entries are hints, never the truth: an entry is live when the key's record exists with that due time.
 * Records replaced, consumed, cancelled or moved by a failed attempt leave their old entries behind; a
 * reader checks entries against the records (batch direct get `multi_last`), and removes the head of a
 * second once every entry in it is stale (a purge bounded by sequence, so entries written meanwhile stay),
 * and an hour's marker once it has no seconds left. A stale entry never turns live again: a record that
 * matches it again was written with an entry of its own.
 *
 * Cost per schedule: one record message, one pair in a due-index message, and (shared) the hour marker.
 *
 * Within one process the index remembers, per second being drained, the sequence below which every
 * entry is stale or claimed by an open delivery of this process, so concurrent deliveries do not read
 * each other's claims again. That memory is bounded by the seconds being drained and is only an
 * optimisation: a new process reads from the head.
 */

const PAGE = 1000;
/**
 * A spreading delivery (several processes drain one backlog) starts in one of this many earliest due
 * seconds, at random, before it reads them in order.
 */
const SPREAD_SECONDS = 8;
/** How long a spreading delivery avoids a second where it met another process's claims, in ms. */
const MET_MEMORY_MS = 1000;
/** How long a listing of the index's subjects is used before it is read again, in ms. */
const LISTING_TTL_MS = 500;

/** The reconciliation sweep (see {@link DueIndex.repair}): how many records one pass reads. */
const REPAIR_PAGE = 250;
/** The most schedules one pass of the sweep indexes again. */
const REPAIR_MAX = 200;
/** Pages of one second's entries the sweep reads looking for a pair (beyond, it is taken as present). */
const REPAIR_SECOND_PAGES = 5;

/** How often a delivering process runs a pass of the reconciliation sweep, and its grace; see the adapter. */
export interface RepairSettings {
  /** Time between two passes, in ms. */
  everyMs: number;
  /** How long past its due time a pending schedule may wait unclaimed before a pass looks at it, in ms. */
  graceMs: number;
}

export const REPAIR_DEFAULTS: RepairSettings = { everyMs: 10_000, graceMs: 30_000 };

/** A live entry found by a scan: its schedule, where its record and its entry are. */
export interface Found extends Claim {
  /** The due-index subject the entry is on, and its sequence. */
  bucket: string;
  entrySeq: number;
  /** The sequence of this process's claim marker, while it holds one (see claims.ts). */
  claimSeq?: number;
  /** An earlier claim of this record lapsed unsettled (see claims.ts). */
  interrupted?: boolean;
}

/**
 * The pairs of `entries`, one entry each, from a random pair on and wrapping around (the spread read of
 * {@link DueIndex.due}: nothing is learnt about the head from it).
 */
function rotated<E extends { m: StoredMessage; pairs: DuePair[] }>(
  entries: E[],
): { m: StoredMessage; pairs: DuePair[] }[] {
  const flat = entries.flatMap(({ m, pairs }) => pairs.map((pair) => ({ m, pairs: [pair] })));
  const at = Math.floor(Math.random() * flat.length);
  return [...flat.slice(at), ...flat.slice(0, at)];
}

/** Keys claimed by open deliveries of this process (or, seen claimed, by other processes). */
interface Held {
  has(key: string): boolean;
  /**
   * The entry through which `key` was claimed. Only that entry counts as claimed: another entry of the
   * key (the schedule put again while an earlier version is being delivered) is work still to do.
   */
  entry?(key: string): Pick<Found, 'bucket' | 'entrySeq'> | undefined;
}

/** Where a claiming scan registers what it takes, at once (so a purge elsewhere never passes it). */
interface Claims extends Held {
  set(key: string, found: Found): unknown;
}

/** What a read of one second looks for, and where it puts what it finds. */
interface ReadState {
  now: number;
  want: number;
  held: Held;
  taken: Set<string>;
  found: Found[];
  /** When claiming: where each schedule taken is registered at once. */
  claims: Claims | undefined;
  /** Read from here rather than from the scan position (nothing is learnt about the head then). */
  from?: number;
}

export class DueIndex {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #versionBase: number;
  readonly #logger: Logger;
  /** Per second being drained: every entry below this sequence is stale or claimed here. */
  readonly #scanFrom = new Map<string, number>();
  /**
   * Per second: how often its scan position was moved back (a claim given back). A read that started
   * before such a move may not move the position forward: it did not see the entry given back.
   */
  readonly #moves = new Map<string, number>();
  /** The second this process drains while other processes drain the same seconds (see {@link due}). */
  #lane: string | undefined;
  /** Seconds where another process's claims were met, and when (avoided for {@link MET_MEMORY_MS}). */
  readonly #met = new Map<string, number>();
  /** Per second: the sequence its head was purged up to. */
  readonly #purged = new Map<string, number>();
  /** The listings of hours and of their seconds (see {@link #hours}). */
  #hourList: { hours: number[]; expires: number } | undefined;
  readonly #secondLists = new Map<number, { seconds: number[]; expires: number }>();
  readonly #noted: { due: number; at: number }[] = [];
  /** Per second: the `[key, due]` pairs known to be stale (see {@link #markStale}). */
  readonly #stale = new Map<string, Set<string>>();
  /** Per second: the highest entry sequence read (how far a random start may reach). */
  readonly #lastSeen = new Map<string, number>();
  /**
   * Bumped by {@link reset}: a read that started before may not move a scan position (it may rest on
   * what was forgotten).
   */
  #epoch = 0;
  /** Where the next pass of the reconciliation sweep reads records from (a stream sequence). */
  #repairFrom = 1;

  constructor(io: NatsIo, layout: Layout, versionBase: number, logger: Logger) {
    this.#io = io;
    this.#layout = layout;
    this.#versionBase = versionBase;
    this.#logger = logger;
  }

  /**
   * The hours holding due-index subjects, ascending. The listing is kept for {@link LISTING_TTL_MS} and
   * updated with what this process writes ({@link noteDue}) and what other processes announce: a hint of
   * where to look, never the truth (entries are), so a stale listing delays at most, and costs a read.
   */
  async #hours(): Promise<number[]> {
    const cached = this.#hourList;
    if (cached && cached.expires > performance.now()) return cached.hours;
    const subjects = await this.#io.subjects(this.#layout.storeStream, this.#layout.hourMarkers);
    const hours = [...subjects.keys()]
      .map((s) => Number(s.slice(s.lastIndexOf('.') + 1)))
      .sort((a, b) => a - b);
    // What was written while the listing was on its way may be missing from it.
    for (const due of this.#recent()) insertSorted(hours, bucketOf(due).hour);
    this.#hourList = { hours, expires: performance.now() + LISTING_TTL_MS };
    return hours;
  }

  /** The seconds of `hour` holding entries, ascending (kept like the hours). An hour without any loses its marker. */
  async #seconds(hour: number): Promise<number[]> {
    const cached = this.#secondLists.get(hour);
    // An hour whose seconds all went is listed again at once: if it is empty, its marker goes.
    if (cached && cached.seconds.length > 0 && cached.expires > performance.now()) return cached.seconds;
    const subjects = await this.#io.subjects(this.#layout.storeStream, this.#layout.bucketsOf(hour));
    if (subjects.size === 0) {
      this.#forgetHour(hour);
      await this.#dropHour(hour);
      return [];
    }
    const seconds = [...subjects.keys()]
      .map((subject) => Number(subject.slice(subject.lastIndexOf('.') + 1)))
      .sort((a, b) => a - b);
    for (const due of this.#recent()) {
      const b = bucketOf(due);
      if (b.hour === hour) insertSorted(seconds, b.second);
    }
    this.#secondLists.set(hour, { seconds, expires: performance.now() + LISTING_TTL_MS });
    return seconds;
  }

  /** Records that entries due at `dues` were written (by this process, or announced by another). */
  noteDue(dues: Iterable<number>): void {
    const now = performance.now();
    for (const due of dues) {
      const { hour, second } = bucketOf(due);
      if (this.#hourList) insertSorted(this.#hourList.hours, hour);
      const seconds = this.#secondLists.get(hour);
      if (seconds) insertSorted(seconds.seconds, second);
      this.#noted.push({ due, at: now });
    }
  }

  /** Dues noted within the last listing lifetime (a listing fetched now may predate them). */
  #recent(): number[] {
    const since = performance.now() - LISTING_TTL_MS;
    while (this.#noted.length > 0 && (this.#noted[0] as { at: number }).at < since) this.#noted.shift();
    return this.#noted.map((n) => n.due);
  }

  #forgetHour(hour: number): void {
    this.#secondLists.delete(hour);
    const list = this.#hourList?.hours;
    const i = list?.indexOf(hour) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
  }

  #forgetSecond(subject: string): void {
    this.#stale.delete(subject);
    this.#lastSeen.delete(subject);
    const [hour, second] = subject.split('.').slice(-2).map(Number) as [number, number];
    const list = this.#secondLists.get(hour)?.seconds;
    const i = list?.indexOf(second) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
  }

  /** Removes an hour's marker (only the message read: a marker written meanwhile stays). */
  async #dropHour(hour: number): Promise<void> {
    const subject = this.#layout.hourMarker(hour);
    const marker = await this.#io.last(this.#layout.storeStream, subject);
    if (!marker) return;
    // Check again: an entry written after the listing above comes with a newer marker, which stays.
    const subjects = await this.#io.subjects(this.#layout.storeStream, this.#layout.bucketsOf(hour));
    if (subjects.size > 0) return;
    await this.#io.purge(this.#layout.storeStream, { filter: subject, before: marker.seq + 1 });
  }

  /** Walks the seconds in order, from the earliest, while their start is at most `until`. */
  async *#walk(until: number): AsyncGenerator<{ subject: string; start: number }> {
    // Copies: the lists change while the walk waits for reads.
    for (const hour of [...(await this.#hours())]) {
      if (bucketStart(hour, 0) > until) return;
      for (const second of [...(await this.#seconds(hour))]) {
        const start = bucketStart(hour, second);
        if (start > until) return;
        yield { subject: `${this.#layout.prefix}.q.${hour}.${second}`, start };
      }
      // Every second of the hour went while it was read: list it again (an empty hour loses its marker).
      if (this.#secondLists.get(hour)?.seconds.length === 0) await this.#seconds(hour);
    }
  }

  /**
   * Up to `limit` live entries due by `now`, in due-second order and, within a second, in commit order,
   * skipping keys in `held`. With `spread` (other processes drain the same index), from a second of this
   * process's own among the {@link SPREAD_SECONDS} earliest first, and from random places in a second.
   */
  async due(
    now: number,
    limit: number,
    held: Held,
    options: { claim: boolean; spread?: boolean },
  ): Promise<Found[]> {
    const found: Found[] = [];
    const taken = new Set<string>();
    const state = () => ({
      now,
      want: limit - found.length,
      held,
      taken,
      found,
      claims: options.claim ? (held as Claims) : undefined,
    });
    // Several processes draining one backlog: each drains a second of its own, picked at random among the
    // earliest due ones, so they take different schedules (and claim without meeting), and rarely read
    // entries another consumed. It keeps it until it is empty or another process is met there.
    if (options.spread) {
      const seconds: string[] = [];
      for await (const second of this.#walk(now)) {
        seconds.push(second.subject);
        if (seconds.length >= SPREAD_SECONDS) break;
      }
      for (let tries = 0; seconds.length > 1 && tries < 3 && found.length < limit; tries++) {
        if (this.#lane === undefined || !seconds.includes(this.#lane)) this.#lane = this.#pick(seconds);
        const lane = this.#lane;
        await this.#read(lane, state());
        if (found.length < limit) {
          // Exhausted here (as far as this process may take): another.
          seconds.splice(seconds.indexOf(lane), 1);
          if (this.#lane === lane) this.#lane = undefined;
        }
      }
    }
    for await (const second of this.#walk(now)) {
      if (found.length >= limit) break;
      if (options.spread) await this.#spreadRead(second.subject, state());
      const s = state();
      if (s.want > 0) await this.#read(second.subject, s);
      if (found.length >= limit) break;
    }
    return found;
  }

  /**
   * Reads one second from a random place: a random message when the second holds many more than `want`
   * (as far as this process has seen), and within the page read, from a random pair on (a message holds
   * the pairs of a whole commit). Nothing is learnt about the head from it (scan position, purges).
   */
  async #spreadRead(subject: string, s: ReadState): Promise<void> {
    if (s.want <= 0) return;
    const start = this.#scanFrom.get(subject) ?? 1;
    const span = (this.#lastSeen.get(subject) ?? 0) - start;
    const from = span > 4 * s.want ? start + Math.floor(Math.random() * span) : start;
    await this.#read(subject, { ...s, from });
  }

  /**
   * The earliest due time among live entries not in `held` (the caller adds its own claims'), or
   * undefined when there is none. Reads the earliest second with a live entry.
   */
  async next(held: Held): Promise<number | undefined> {
    for await (const second of this.#walk(Number.POSITIVE_INFINITY)) {
      const min = await this.#earliest(second.subject, held);
      if (min !== undefined) return min;
    }
    return undefined;
  }

  /**
   * Reads one second's entries from where this process left off. Live entries due by `now` go into
   * `found` (up to `want`). When claiming, moves the second's scan position past entries that are stale
   * or claimed here; purges its stale head.
   */
  async #read(subject: string, s: ReadState): Promise<void> {
    const atHead = s.from === undefined;
    let from = s.from ?? this.#scanFrom.get(subject) ?? 1;
    const moves = this.#moves.get(subject) ?? 0;
    const epoch = this.#epoch;
    /** Entries below it are stale or claimed (the scan position may follow). */
    let scanUpTo = from;
    let scanning = atHead;
    /**
     * Entries below it are stale (a head that may be purged): only known when the read started at the
     * head (below the scan position, entries may be claimed here, not stale).
     */
    const head = this.#purged.get(subject) ?? 1;
    let staleOnly = atHead && from <= head;
    let staleUpTo = staleOnly ? from : head;
    const records = new Map<string, Claim | null>();
    let done = false;
    while (!done) {
      const { messages, pending } = await this.#io.range(this.#layout.storeStream, subject, from, PAGE);
      if (messages.length === 0) {
        if (atHead && from <= head) this.#forgetSecond(subject);
        break;
      }
      const lastSeq = (messages.at(-1) as StoredMessage).seq;
      if (lastSeq > (this.#lastSeen.get(subject) ?? 0)) this.#lastSeen.set(subject, lastSeq);
      let entries = messages.map((m) => ({ m, pairs: safePairs(m, this.#logger) }));
      // Away from the head, a page is taken from a random pair on (wrapping around): a message holds the
      // pairs of a whole commit, so several processes reading one second meet less often.
      if (!atHead) entries = rotated(entries);
      // Keys to check, in entry order; checked a chunk at a time, as far as the claims need.
      const keys: string[] = [];
      const queued = new Set<string>();
      const known = this.#stale.get(subject);
      for (const { m, pairs } of entries)
        for (const [key, due] of pairs)
          if (
            due <= s.now &&
            !s.held.has(key) &&
            !s.taken.has(key) &&
            !queued.has(key) &&
            !known?.has(pairId(m.seq, key, due))
          ) {
            queued.add(key);
            keys.push(key);
          }
      let checked = 0;
      const check = async () => {
        const chunk = keys.slice(checked, checked + Math.max(32, (s.want - s.found.length) * 2));
        checked += chunk.length;
        const live = await this.#records(chunk);
        for (const key of chunk) records.set(key, live.get(key) ?? null);
      };
      for (const { m, pairs } of entries) {
        if (s.found.length >= s.want) {
          done = true;
          break;
        }
        let claimedOrStale = true;
        let stale = true;
        for (const [key, due] of pairs) {
          if (s.taken.has(key)) {
            // Taken by this read from an earlier entry: the same record, or this pair is stale.
            stale = false;
            continue;
          }
          if (s.held.has(key)) {
            stale = false;
            // The scan position (and with it the purge of a stale head) passes only the very entry
            // held: an entry of a version put since then is live, and the held one may well be refused.
            const entry = s.held.entry?.(key);
            if (entry?.bucket !== subject || entry.entrySeq !== m.seq) claimedOrStale = false;
            continue;
          }
          if (due > s.now) {
            claimedOrStale = stale = false;
            continue;
          }
          if (this.#stale.get(subject)?.has(pairId(m.seq, key, due))) continue; // known stale
          if (!records.has(key)) {
            // Not collected above (held then, given back since): it is checked first, never assumed.
            if (!queued.has(key)) {
              queued.add(key);
              keys.splice(checked, 0, key);
            }
            await check();
          }
          const record = records.get(key);
          if (!record || record.schedule.dueAt.getTime() !== due) {
            this.#markStale(subject, m.seq, key, due);
            continue;
          }
          stale = false;
          if (s.found.length < s.want) {
            const f: Found = { ...record, bucket: subject, entrySeq: m.seq };
            s.taken.add(key);
            s.found.push(f);
            s.claims?.set(key, f);
          } else claimedOrStale = false;
        }
        if (scanning && claimedOrStale) scanUpTo = m.seq + 1;
        else scanning = false;
        if (staleOnly && stale) staleUpTo = m.seq + 1;
        else staleOnly = false;
      }
      from = (messages.at(-1) as StoredMessage).seq + 1;
      if (pending === 0 || messages.length < PAGE) break;
    }
    // Only claims move the scan position: what a listing found is still to be delivered.
    if (
      atHead &&
      s.claims &&
      this.#epoch === epoch &&
      (this.#moves.get(subject) ?? 0) === moves &&
      scanUpTo > (this.#scanFrom.get(subject) ?? 1)
    )
      this.#scanFrom.set(subject, scanUpTo);
    // A stale head goes (entries of open deliveries, and live ones, stop it).
    if (staleUpTo > head) await this.purge(subject, staleUpTo);
  }

  /**
   * The earliest due time among live entries of one second not in `held`: pairs are checked in due order
   * until one is live. A second whose entries are all stale is purged.
   */
  async #earliest(subject: string, held: Held): Promise<number | undefined> {
    const head = this.#purged.get(subject) ?? 1;
    const pairs: { key: string; due: number; seq: number }[] = [];
    let end = head;
    let heldSeen = false;
    const known = this.#stale.get(subject);
    for await (const m of this.#io.scan(this.#layout.storeStream, subject, PAGE, head)) {
      for (const [key, due] of safePairs(m, this.#logger)) {
        if (held.has(key)) heldSeen = true;
        else if (!known?.has(pairId(m.seq, key, due))) pairs.push({ key, due, seq: m.seq });
      }
      end = m.seq + 1;
    }
    pairs.sort((a, b) => a.due - b.due);
    const seen = new Set<string>();
    for (let i = 0; i < pairs.length; ) {
      const chunk: { key: string; due: number; seq: number }[] = [];
      for (; i < pairs.length && chunk.length < 64; i++) {
        const p = pairs[i] as { key: string; due: number; seq: number };
        if (!seen.has(`${p.key}\u0000${p.due}`)) {
          seen.add(`${p.key}\u0000${p.due}`);
          chunk.push(p);
        }
      }
      const live = await this.#records([...new Set(chunk.map((p) => p.key))]);
      for (const p of chunk) {
        if (live.get(p.key)?.schedule.dueAt.getTime() === p.due) return p.due;
        this.#markStale(subject, p.seq, p.key, p.due);
      }
    }
    if (end === head) this.#forgetSecond(subject);
    // Nothing live here: the second goes, unless open deliveries of this process hold entries in it.
    if (!heldSeen && end > head) {
      await this.purge(subject, end);
      this.#forgetSecond(subject);
    }
    return undefined;
  }

  /** The live records of `keys`, by key. */
  async #records(keys: string[]): Promise<Map<string, Claim>> {
    const out = new Map<string, Claim>();
    if (keys.length === 0) return out;
    const subjects = keys.map((k) => this.#layout.record(k));
    const found = await this.#io.lastOf(this.#layout.storeStream, subjects);
    for (const key of keys) {
      const m = found.get(this.#layout.record(key));
      if (!m) continue;
      const schedule = toSchedule(key, m, this.#versionBase);
      if (schedule) out.set(key, { schedule, seq: m.seq });
    }
    return out;
  }

  /**
   * A claim of this process was given back unconsumed (put back, or its commit refused): its entry must
   * be read again.
   */
  released(found: Pick<Found, 'bucket' | 'entrySeq'>): void {
    this.#moves.set(found.bucket, (this.#moves.get(found.bucket) ?? 0) + 1);
    const from = this.#scanFrom.get(found.bucket);
    if (from !== undefined && found.entrySeq < from) this.#scanFrom.set(found.bucket, found.entrySeq);
  }

  /**
   * Removes the entries of `subject` below `before`, which the caller knows to be stale. Bounded by
   * sequence, so entries written meanwhile stay. Failures are logged: a later pass purges again.
   */
  async purge(subject: string, before: number): Promise<void> {
    if (before <= (this.#purged.get(subject) ?? 1)) return;
    this.#purged.set(subject, before);
    try {
      await this.#io.purge(this.#layout.storeStream, { filter: subject, before });
    } catch (error) {
      this.#purged.delete(subject);
      this.#logger.warn('nats store: purging stale due-index entries failed; a later pass retries', {
        subject,
        error,
      });
    }
  }

  /**
   * A claim of this process was consumed: its entry is stale now (and stays so), not to be checked again.
   */
  consumed(found: Pick<Found, 'bucket' | 'entrySeq' | 'schedule'>): void {
    this.#markStale(found.bucket, found.entrySeq, found.schedule.key, found.schedule.dueAt.getTime());
  }

  /**
   * Remembers a stale `[key, due]` pair of an entry of a second: a stale pair never turns live again, so it is never
   * checked again. Bounded by the second's entries; forgotten with the second.
   */
  #markStale(subject: string, entrySeq: number, key: string, due: number): void {
    let set = this.#stale.get(subject);
    if (!set) {
      set = new Set();
      this.#stale.set(subject, set);
    }
    set.add(pairId(entrySeq, key, due));
  }

  /** The scan position of `subject` (for the caller's purge after a commit). */
  scanPosition(subject: string): number | undefined {
    return this.#scanFrom.get(subject);
  }

  /**
   * Forgets what this process learnt of the index (scan positions, stale pairs, listings): the next reads
   * start from the heads of the seconds and list the subjects again. Entries held by open deliveries are
   * skipped as before. Called after a reconnection and by the reconciliation sweep.
   */
  reset(): void {
    this.#epoch++;
    this.#lane = undefined;
    this.#scanFrom.clear();
    this.#lastSeen.clear();
    this.#stale.clear();
    this.#purged.clear();
    this.#hourList = undefined;
    this.#secondLists.clear();
  }

  /**
   * One pass of the reconciliation sweep: reads the next {@link REPAIR_PAGE} records (in stream order,
   * from where the last pass stopped, wrapping around), and for each pending schedule due more than
   * `graceMs` before `now` and not in `held` (a schedule that a working index would have had delivered)
   * checks that the index has its pair on the subject of its second and the marker of its hour. Missing
   * ones are indexed again (a duplicate pair is harmless: entries are hints). When any such schedule is
   * found, this process's positions are forgotten too ({@link reset}), so a skip kept in memory heals.
   *
   * Whatever went wrong before (a bug, a purge by hand, a server that lost messages), every due schedule
   * is so found again after at most one round of the records. Cost per pass: one page of records, one
   * listing of the hours, and a read of each second holding a late schedule. Returns the due times of the
   * pairs indexed again.
   */
  async repair(now: number, graceMs: number, held: Held): Promise<number[]> {
    const { storeStream } = this.#layout;
    const { messages, pending } = await this.#io.range(
      storeStream,
      this.#layout.recordFilter(''),
      this.#repairFrom,
      REPAIR_PAGE,
    );
    const last = messages.at(-1);
    this.#repairFrom = !last || pending === 0 ? 1 : last.seq + 1;
    const late: { key: string; due: number }[] = [];
    for (const m of messages) {
      const key = this.#layout.keyOfRecord(m.subject);
      if (held.has(key)) continue;
      let schedule: Schedule | undefined;
      try {
        schedule = toSchedule(key, m, this.#versionBase);
      } catch {
        continue; // reported to whoever reads it
      }
      const due = schedule?.dueAt.getTime();
      if (due !== undefined && due <= now - graceMs) late.push({ key, due });
    }
    if (late.length === 0) return [];
    late.sort((a, b) => a.due - b.due);
    late.length = Math.min(late.length, REPAIR_MAX);
    this.reset();
    const hours = await this.#io.subjects(storeStream, this.#layout.hourMarkers);
    const bySecond = new Map<string, { key: string; due: number }[]>();
    for (const p of late) {
      const subject = this.#layout.bucket(p.due);
      bySecond.set(subject, [...(bySecond.get(subject) ?? []), p]);
    }
    const missing: [string, number][] = [];
    for (const [subject, wanted] of bySecond) {
      const marked = hours.has(this.#layout.hourMarker(bucketOf(wanted[0]!.due).hour));
      const present = new Set<string>();
      let complete = true;
      let pages = 0;
      for (let from = 1; marked; ) {
        const page = await this.#io.range(storeStream, subject, from, PAGE);
        for (const m of page.messages)
          for (const [key, due] of safePairs(m, this.#logger)) present.add(`${key}\u0000${due}`);
        const end = page.messages.at(-1);
        if (!end || page.pending === 0 || page.messages.length < PAGE) break;
        if (++pages >= REPAIR_SECOND_PAGES) {
          complete = false;
          break;
        }
        from = end.seq + 1;
      }
      for (const p of wanted)
        if (!marked || (complete && !present.has(`${p.key}\u0000${p.due}`))) missing.push([p.key, p.due]);
    }
    if (missing.length === 0) return [];
    await this.#io.atomicPublish(indexMessages(this.#layout, missing));
    const dues = missing.map(([, due]) => due);
    this.noteDue(dues);
    this.#logger.warn('nats store: due schedules were missing from the due index; indexed again', {
      count: missing.length,
      keys: missing.slice(0, 10).map(([key]) => key),
    });
    return dues;
  }

  /**
   * Another process claimed entries of these seconds first: a second this process drains as its own is
   * left for another, picked at random (see {@link due}).
   */
  met(seconds: Iterable<string>): void {
    const now = performance.now();
    for (const subject of seconds) {
      if (subject === this.#lane) this.#lane = undefined;
      this.#met.set(subject, now);
    }
  }

  /** A second at random among `seconds`, one where no other process was met lately if there is one. */
  #pick(seconds: readonly string[]): string {
    const since = performance.now() - MET_MEMORY_MS;
    for (const [subject, at] of this.#met) if (at < since) this.#met.delete(subject);
    const free = seconds.filter((subject) => !this.#met.has(subject));
    const from = free.length > 0 ? free : seconds;
    return from[Math.floor(Math.random() * from.length)] as string;
  }

  /** Forgets a second that was purged whole. */
  forget(subject: string): void {
    this.#lastSeen.delete(subject);
    this.#scanFrom.delete(subject);
    this.#purged.delete(subject);
    this.#moves.delete(subject);
  }
}

export type { Schedule };
