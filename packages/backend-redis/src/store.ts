import {
  BackendError,
  backoff,
  type Changes,
  type Claimed,
  type ClaimRequest,
  type Clock,
  ConflictError,
  type ConflictKind,
  type DeadLetterListQuery,
  type DeadLetterRecord,
  type Event,
  isTransient,
  type ListQuery,
  type Logger,
  retry,
  type Schedule,
  type ScheduleHead,
  type StoreAdapter,
  type Unit,
  type WatchEvent,
} from '@duetime/core';
import { decodeStored, decodeStoredDeadLetter, decodeStoredEvent } from './codec.js';
import { encodeCommit, encodeSettlement, encodeWrites } from './commit.js';
import type { KeySpace } from './keys.js';
import type { Arg, ScriptRunner } from './scripts.js';
import { type WatchSettings, watchChanges } from './watch.js';

/** Entries one `list` call examines at most, so a sparse prefix never blocks the server for long. */
const LIST_BUDGET = 4096;
/** Up to this many keys under a prefix are sorted directly from the key index. */
const LIST_SORT_LIMIT = 2000;

/** A unit: nothing but its claim token ('' without claims) and what it claimed. */
export interface RedisUnit extends Unit<undefined> {
  readonly token: string;
  readonly claimed?: readonly Claimed[];
}

export interface StoreSettings {
  runner: ScriptRunner;
  keys: KeySpace;
  /** Unique per backend instance: starts claim tokens and commit ids, names this sender on the channel. */
  senderId: string;
  /** Claim time to live in ms, or undefined when claims are off. */
  claimTtl: number | undefined;
  watch: WatchSettings;
  logger: Logger;
  clock: Clock;
  /** How long a commit keeps retrying through connection loss, and how long its marker lives, in ms. */
  commitTimeoutMs: number;
  markerTtl: number;
}

const KINDS: ReadonlySet<string> = new Set(['aggregate', 'schedule', 'version']);

/**
 * The store adapter (buffered): a unit opens nothing; one `deliver` script call claims a page of due
 * schedules (claims in `{prefix}:claims`, each with its owner's token, the version and an expiry on the
 * server's clock, renewed by core every third of it); one `commit` script call applies a unit's writes and
 * settlements, each group all or nothing, and ends its claims. Reads go straight to the hashes and sorted
 * sets; other instances' commits arrive over pub/sub.
 */
export class RedisStore implements StoreAdapter<undefined, RedisUnit> {
  readonly #s: StoreSettings;
  #units = 0;
  #commits = 0;
  readonly #watching = new Set<() => void>();
  readonly renew?: (unit: RedisUnit) => Promise<void>;
  readonly renewEveryMs?: number;

  constructor(settings: StoreSettings) {
    this.#s = settings;
    const ttl = settings.claimTtl;
    if (ttl !== undefined) {
      this.renewEveryMs = Math.max(10, Math.floor(ttl / 3));
      this.renew = async (unit) => {
        const keys = unit.claimed?.map((s) => s.key) ?? [];
        if (keys.length > 0) await this.#claims('renew claims', 'claim-renew', [unit.token, ttl, ...keys]);
      };
    }
  }

  async begin(claim?: ClaimRequest): Promise<RedisUnit> {
    const { keys, claimTtl, senderId } = this.#s;
    const token = claimTtl === undefined || !claim ? '' : `${senderId}.${(++this.#units).toString(36)}`;
    if (!claim) return { token };
    const args = [claim.now.getTime(), claim.limit, claimTtl ?? 0, token];
    const reply = await this.#list(
      'claim due schedules',
      'deliver',
      [keys.due, keys.schedules, keys.claims],
      args,
    );
    const claimed: Claimed[] = [];
    try {
      for (let i = 0; i + 2 < reply.length; i += 3) {
        const schedule: Claimed = decodeStored(String(reply[i]), reply[i + 1], keys.schedules);
        if (reply[i + 2] === 1) schedule.interrupted = true;
        claimed.push(schedule);
      }
    } catch (error) {
      // A message that is not duetime's: put the page back (its claims would only lapse) and say so.
      const page = reply.filter((_, i) => i % 3 === 0).map(String);
      if (token !== '')
        await this.#claims('release claims', 'claim-release', [token, ...page]).catch(() => {});
      throw error;
    }
    return { token, claimed };
  }

  /**
   * One `commit` script call: the plain writes as the first group (their conflict is thrown), then one group
   * per settlement, whose conflicts are returned by key; the unit's claims end. The call carries an id
   * unique to this instance, recorded with the changes (a marker key living `markerTtl`, holding the groups
   * left out): a resend of a call whose reply was lost (by the retry here, or by ioredis after reconnecting)
   * finds the marker, applies nothing and answers as the first run did.
   */
  async commit(unit: RedisUnit, changes: Changes): Promise<ReadonlyMap<string, Error>> {
    const rejected = new Map<string, Error>();
    const plain = changes.writes.length > 0;
    if (!plain && changes.settlements.length === 0) {
      await this.rollback(unit);
      return rejected;
    }
    const commitId = `${this.#s.senderId}.${(++this.#commits).toString(36)}`;
    const claimed = unit.claimed?.map((s) => s.key) ?? [];
    const { keys, args } = encodeCommit(this.#s, commitId, { token: unit.token, claimed }, (list) => [
      ...(plain ? [encodeWrites(changes.writes, list)] : []),
      ...changes.settlements.map((s) => encodeSettlement(s, list)),
    ]);
    let reply: unknown;
    try {
      reply = await this.#send(keys, args);
    } catch (error) {
      // Applied once or not at all: releasing never undoes a consumption, so the claims end either way.
      await this.rollback(unit).catch(() => {});
      throw error;
    }
    const unexpected = () =>
      new BackendError('commit', `unexpected reply from the commit script: ${JSON.stringify(reply)}`);
    if (!Array.isArray(reply) || (reply.length - 1) % 3 !== 0) throw unexpected();
    if (reply[0] === 'duplicate')
      this.#s.logger.debug('redis commit was already applied; a resend was recognised', { commitId });
    else if (reply[0] !== 'ok') throw unexpected();
    for (let i = 1; i < reply.length; i += 3) {
      const group = Number(reply[i]) - (plain ? 1 : 0);
      const kind = reply[i + 1] as ConflictKind;
      const settlement = changes.settlements[group - 1];
      if (!KINDS.has(kind) || (group !== 0 && !settlement)) throw unexpected();
      const conflict = new ConflictError(kind, String(reply[i + 2]));
      if (!settlement) throw conflict;
      rejected.set(settlement.schedule.key, conflict);
    }
    return rejected;
  }

  /** Sends a commit, again after a transient failure, for `commitTimeoutMs`. */
  #send(keys: string[], args: Arg[]): Promise<unknown> {
    const { runner, logger } = this.#s;
    return retry(
      (attempt) =>
        runner.script('commit', 'commit', keys, args).catch((error: unknown) => {
          if (isTransient(error)) logger.warn('redis commit failed; retrying', { attempt, error });
          throw error;
        }),
      {
        clock: this.#s.clock,
        retryIf: isTransient,
        deadlineMs: this.#s.commitTimeoutMs,
        delayMs: backoff({ initialMs: 50, maxMs: 1000, jitter: 0.5 }),
        onGiveUp: (error, elapsed, attempts) =>
          new BackendError(
            'commit',
            `gave up after ${attempts} attempts in ${elapsed} ms (${(error as Error).message}); the commit was not confirmed: if an attempt reached the server it applied once, otherwise not at all`,
            { cause: error, transient: true },
          ),
      },
    );
  }

  async rollback(unit: RedisUnit): Promise<void> {
    const keys = unit.claimed?.map((s) => s.key) ?? [];
    if (unit.token !== '' && keys.length > 0)
      await this.#claims('release claims', 'claim-release', [unit.token, ...keys]);
  }

  #claims(operation: string, script: 'claim-renew' | 'claim-release', args: Arg[]) {
    return this.#s.runner.script(operation, script, [this.#s.keys.claims], args);
  }

  async #list(operation: string, script: 'deliver' | 'list' | 'dead-list', keys: string[], args: Arg[]) {
    return (await this.#s.runner.script(operation, script, keys, args)) as unknown[];
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const key = this.#s.keys.events(aggregateId);
    const raw = await this.#s.runner.read(`load events of ${JSON.stringify(aggregateId)}`, key, (c) =>
      c.lrange(key, 0, -1),
    );
    return raw.map((value) => decodeStoredEvent(aggregateId, value, key));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const { schedules } = this.#s.keys;
    const value = await this.#s.runner.read(`load schedule ${JSON.stringify(key)}`, schedules, (c) =>
      c.hget(schedules, key),
    );
    return value === null ? undefined : decodeStored(key, value, schedules);
  }

  async listSchedules(query: ListQuery): Promise<ScheduleHead[]> {
    const { keys } = this.#s;
    const { order, prefix, recurring, limit } = query;
    const index = order === 'at' ? keys.at : order === 'due' ? keys.due : keys.index;
    const through = order === 'key' ? undefined : query.through;
    const heads = query.select === 'heads';
    const items: ScheduleHead[] = [];
    let after = query.after && { at: order === 'key' ? 0 : query.after.at, key: query.after.key };
    for (;;) {
      const args = [through?.getTime() ?? '', prefix ?? '', after?.at ?? '', after?.key ?? ''];
      args.push(limit - items.length, LIST_BUDGET, LIST_SORT_LIMIT);
      args.push(recurring === undefined ? '' : recurring ? '1' : '0', heads ? '1' : '');
      const reply = await this.#list('list schedules', 'list', [index, keys.schedules, keys.index], args);
      const [done, resumeAt, resumeKey] = reply;
      for (let i = 3; i + 1 < reply.length; i += 2)
        items.push(decodeStored(String(reply[i]), reply[i + 1], keys.schedules, heads));
      if (done === 1 || items.length >= limit) return items;
      after = { at: Number(resumeAt), key: String(resumeKey) };
    }
  }

  /** One `dead-list` script call: a ZRANGE BYLEX page of the dead-letter index and the records with it. */
  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    const { keys } = this.#s;
    const args = [query.prefix ?? '', query.after ?? '', query.limit];
    const reply = await this.#list('list dead letters', 'dead-list', [keys.dead, keys.deadIndex], args);
    const out: DeadLetterRecord[] = [];
    for (let i = 0; i + 1 < reply.length; i += 2)
      out.push(decodeStoredDeadLetter(String(reply[i]), reply[i + 1], keys.dead));
    return out;
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    const stop = watchChanges(this.#s.watch, listener);
    this.#watching.add(stop);
    return () => {
      this.#watching.delete(stop);
      stop();
    };
  }

  /** Stops every subscriber (the backend is closing). */
  stopWatching(): void {
    for (const stop of this.#watching) stop();
    this.#watching.clear();
  }
}
