import type {
  Changes,
  Claimed,
  ClaimRequest,
  DeadLetterListQuery,
  DeadLetterRecord,
  Event,
  ListQuery,
  Logger,
  Schedule,
  ScheduleHead,
  StoreAdapter,
  Unit,
  WatchEvent,
} from '@duetime/core';
import { decodePairs, decodeStored, decodeStoredDeadLetter, decodeStoredEvent } from './codec.js';
import type { Committer } from './commit.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import { runScript, type ScriptRunner } from './scripts.js';
import type { ChangeWatcher } from './watch.js';

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
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  /** Starts claim tokens: unique per backend instance. */
  senderId: string;
  /** Claim time to live in ms, or undefined when claims are off. */
  claimTtl: number | undefined;
  committer: Committer;
  watcher: ChangeWatcher;
}

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
    const reply = (await runScript(
      this.#s,
      'claim due schedules',
      'deliver',
      [keys.due, keys.schedules, keys.claims],
      [claim.now.getTime(), claim.limit, claimTtl ?? 0, token],
    )) as unknown[];
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

  async commit(unit: RedisUnit, changes: Changes): Promise<ReadonlyMap<string, Error>> {
    const claimed = unit.claimed?.map((s) => s.key) ?? [];
    try {
      return await this.#s.committer.commit(unit.token, claimed, changes);
    } catch (error) {
      // Applied once or not at all: releasing never undoes a consumption, so the claims end either way.
      await this.rollback(unit).catch(() => {});
      throw error;
    }
  }

  async rollback(unit: RedisUnit): Promise<void> {
    const keys = unit.claimed?.map((s) => s.key) ?? [];
    if (unit.token !== '' && keys.length > 0)
      await this.#claims('release claims', 'claim-release', [unit.token, ...keys]);
  }

  #claims(operation: string, script: 'claim-renew' | 'claim-release', args: (string | number)[]) {
    return runScript(this.#s, operation, script, [this.#s.keys.claims], args);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const key = this.#s.keys.events(aggregateId);
    const raw = await this.#read(`load events of ${JSON.stringify(aggregateId)}`, key, (c) =>
      c.lrange(key, 0, -1),
    );
    return raw.map((value) => decodeStoredEvent(aggregateId, value, key));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const { schedules } = this.#s.keys;
    const value = await this.#read(`load schedule ${JSON.stringify(key)}`, schedules, (c) =>
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
      const reply = (await runScript(
        this.#s,
        'list schedules',
        'list',
        [index, keys.schedules, keys.index],
        [
          through ? String(through.getTime()) : '',
          prefix ?? '',
          after ? String(after.at) : '',
          after ? after.key : '',
          limit - items.length,
          LIST_BUDGET,
          LIST_SORT_LIMIT,
          recurring === undefined ? '' : recurring ? '1' : '0',
          heads ? '1' : '',
        ],
      )) as unknown[];
      const [done, resumeAt, resumeKey] = reply;
      items.push(...decodePairs(reply.slice(3), keys.schedules, heads));
      if (done === 1 || items.length >= limit) return items;
      after = { at: Number(resumeAt), key: String(resumeKey) };
    }
  }

  /** One `dead-list` script call: a ZRANGE BYLEX page of the dead-letter index and the records with it. */
  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    const { keys } = this.#s;
    const reply = (await runScript(
      this.#s,
      'list dead letters',
      'dead-list',
      [keys.dead, keys.deadIndex],
      [query.prefix ?? '', query.after ?? '', query.limit],
    )) as unknown[];
    const out: DeadLetterRecord[] = [];
    for (let i = 0; i + 1 < reply.length; i += 2)
      out.push(decodeStoredDeadLetter(String(reply[i]), reply[i + 1], keys.dead));
    return out;
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    return this.#s.watcher.watch(listener);
  }

  async #read<T>(operation: string, key: string, call: (client: ScriptRunner['client']) => Promise<T>) {
    try {
      return await this.#s.runner.call(call);
    } catch (error) {
      throw mapRedisError(error, operation, this.#s.target, key);
    }
  }
}
