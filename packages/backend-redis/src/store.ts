import {
  type BufferedReads,
  createBufferedTransaction,
  type DeadLetterRecord,
  type DeliveryTransaction,
  type DriverDeadLetterQuery,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  type Logger,
  type Schedule,
  type StoreDriver,
} from '@duetime/core';
import { decodeDeadLetter, decodeEvent, decodeSchedule, decodeSchedulePairs } from './codec.js';
import { Committer } from './commit.js';
import { Deliveries } from './delivery.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import { runScript, type ScriptRunner } from './scripts.js';
import type { ChangeWatcher } from './watch.js';

/** Entries one `list` call examines at most, so a sparse prefix never blocks the server for long. */
const LIST_BUDGET = 4096;
/** Up to this many keys under a prefix are sorted directly from the key index. */
const LIST_SORT_LIMIT = 2000;

export interface StoreSettings {
  runner: ScriptRunner;
  keys: KeySpace;
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  /** Identifies this instance in change notifications (to skip its own), commit ids and claim tokens. */
  senderId: string;
  watcher: ChangeWatcher;
  /** Claim time to live in ms, or undefined when claims are off. */
  claimTtl: number | undefined;
  /** How long a commit keeps retrying through connection loss, in ms. */
  commitRetryWindow: number;
  /** How long a commit's marker lives, in ms (longer than the retry window). */
  markerTtl: number;
  /** Throws once the backend is closed. */
  check(): void;
}

/**
 * The store driver: buffered transactions and deliveries whose operations one Lua script (`commit`)
 * applies atomically, deliveries that claim a page of due schedules with one script call (`deliver`),
 * reads straight from the hashes and sorted sets (schedules, dead letters), and remote change
 * notifications over pub/sub.
 */
export class RedisStoreDriver implements StoreDriver<undefined> {
  readonly #s: StoreSettings;
  readonly #committer: Committer;
  readonly #deliveries: Deliveries;
  readonly #reads: BufferedReads = {
    loadEvents: (id) => this.loadEvents(id),
    loadSchedule: (key) => this.loadSchedule(key),
    listSchedules: (query) => this.listSchedules(query),
    loadDeadLetter: (key) => this.loadDeadLetter(key),
  };

  constructor(settings: StoreSettings) {
    this.#s = settings;
    this.#committer = new Committer(settings);
    this.#deliveries = new Deliveries({
      ...settings,
      committer: this.#committer,
      reads: this.#reads,
    });
  }

  async begin(): Promise<DriverTransaction<undefined>> {
    this.#s.check();
    return createBufferedTransaction({
      reads: this.#reads,
      commit: (ops) => this.#committer.transaction(ops),
    });
  }

  /**
   * Claims up to `limit` due schedules with one `deliver` script call (see {@link Deliveries}); the
   * delivery commits every group with one `commit` script call.
   */
  deliver(now: Date, limit: number): Promise<DeliveryTransaction<undefined>> {
    return this.#deliveries.open(now, limit);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#s.check();
    const key = this.#s.keys.events(aggregateId);
    const raw = await this.#read(`load events of ${JSON.stringify(aggregateId)}`, key, () =>
      this.#s.runner.call((c) => c.lrange(key, 0, -1)),
    );
    return raw.map((value) => decodeEvent(value, key));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#s.check();
    const { schedules } = this.#s.keys;
    const value = await this.#read(`load schedule ${JSON.stringify(key)}`, schedules, () =>
      this.#s.runner.call((c) => c.hget(schedules, key)),
    );
    return value === null ? undefined : decodeSchedule(key, value, schedules);
  }

  async listSchedules(query: DriverScheduleQuery): Promise<Schedule[]> {
    this.#s.check();
    const { keys } = this.#s;
    const items: Schedule[] = [];
    let after = query.after;
    for (;;) {
      const reply = (await runScript(
        this.#s,
        'list schedules',
        'list',
        [keys.at, keys.schedules, keys.index],
        [
          query.through ? String(query.through.getTime()) : '',
          query.prefix ?? '',
          after ? String(after.at) : '',
          after ? after.key : '',
          query.limit - items.length,
          LIST_BUDGET,
          LIST_SORT_LIMIT,
        ],
      )) as unknown[];
      const [done, resumeAt, resumeKey] = reply;
      items.push(...decodeSchedulePairs(reply.slice(3), keys.schedules));
      if (done === 1 || items.length >= query.limit) return items;
      after = { at: Number(resumeAt), key: String(resumeKey) };
    }
  }

  async dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    this.#s.check();
    const { keys } = this.#s;
    const reply = (await runScript(
      this.#s,
      'fetch due schedules',
      'due',
      [keys.due, keys.schedules],
      [now.getTime(), limit],
    )) as unknown[];
    return decodeSchedulePairs(reply, keys.schedules);
  }

  /** The earliest due score: a schedule's dueAt, or the expiry of a claim an open delivery holds. */
  async nextDueAt(): Promise<Date | undefined> {
    this.#s.check();
    const score = await runScript(this.#s, 'read the next due time', 'next-due', [this.#s.keys.due], []);
    return score === null ? undefined : new Date(Number(score));
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    this.#s.check();
    const { dead } = this.#s.keys;
    const value = await this.#read(`load dead letter ${JSON.stringify(key)}`, dead, () =>
      this.#s.runner.call((c) => c.hget(dead, key)),
    );
    return value === null ? undefined : decodeDeadLetter(key, value, dead);
  }

  /** One `dead-list` script call: a ZRANGE BYLEX page of the dead-letter index and the records with it. */
  async listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    this.#s.check();
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
      out.push(decodeDeadLetter(String(reply[i]), reply[i + 1], keys.dead));
    return out;
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#s.watcher.watch(onChange);
  }

  async close(): Promise<void> {
    this.#deliveries.close();
    this.#s.watcher.close();
  }

  async #read<T>(operation: string, key: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw mapRedisError(error, operation, this.#s.target, key);
    }
  }
}
