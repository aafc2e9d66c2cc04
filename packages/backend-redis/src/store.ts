import { randomBytes } from 'node:crypto';
import {
  BackendError,
  ConflictError,
  createBufferedTransaction,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  isTransient,
  type Logger,
  type Schedule,
  type StoreDriver,
  type StoreOp,
} from '@duetime/core';
import { ClaimingTransaction, type ClaimOutcome } from './claims.js';
import { decodeEvent, decodeSchedule, decodeSchedulePairs, encodeEvent, encodeMessage } from './codec.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import type { ScriptRunner } from './scripts.js';
import type { ChangeWatcher } from './watch.js';

/** Entries one `list` call examines at most, so a sparse prefix never blocks the server for long. */
const LIST_BUDGET = 4096;
/** Up to this many keys under a prefix are sorted directly from the key index. */
const LIST_SORT_LIMIT = 2000;
/** Claimed entries `due` skips at most beyond its limit. */
const DUE_EXTRA = 1024;
/** Entries `next-due` examines at most. */
const NEXT_DUE_BUDGET = 256;

export interface StoreSettings {
  runner: ScriptRunner;
  keys: KeySpace;
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  /** Identifies this instance in change notifications (to skip its own) and claim values. */
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
 * The store driver: buffered transactions whose operations one Lua script (`commit`) applies atomically,
 * reads straight from the hash and sorted sets, and remote change notifications over pub/sub.
 */
export class RedisStoreDriver implements StoreDriver<undefined> {
  readonly #s: StoreSettings;
  readonly #open = new Set<ClaimingTransaction>();
  #claimCounter = 0;

  constructor(settings: StoreSettings) {
    this.#s = settings;
  }

  async begin(): Promise<DriverTransaction<undefined>> {
    this.#s.check();
    const reads = {
      loadEvents: (id: string) => this.loadEvents(id),
      loadSchedule: (key: string) => this.loadSchedule(key),
      listSchedules: (query: DriverScheduleQuery) => this.listSchedules(query),
    };
    if (this.#s.claimTtl === undefined)
      return createBufferedTransaction({ reads, commit: (ops) => this.commit(ops) });
    const tx: ClaimingTransaction = new ClaimingTransaction({
      driver: this,
      reads,
      claimValue: `${this.#s.senderId}:${++this.#claimCounter}`,
      claimTtl: this.#s.claimTtl,
      logger: this.#s.logger,
      onEnd: () => this.#open.delete(tx),
    });
    this.#open.add(tx);
    return tx;
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
      const reply = (await this.#script(
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
    const reply = (await this.#script(
      'fetch due schedules',
      'due',
      [keys.due, keys.schedules],
      [String(now.getTime()), limit, keys.claimBase, limit + DUE_EXTRA],
    )) as unknown[];
    return decodeSchedulePairs(reply, keys.schedules);
  }

  async nextDueAt(): Promise<Date | undefined> {
    this.#s.check();
    const { keys } = this.#s;
    const score = await this.#script(
      'read the next due time',
      'next-due',
      [keys.due],
      [keys.claimBase, NEXT_DUE_BUDGET],
    );
    return score === null ? undefined : new Date(Number(score));
  }

  async recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean> {
    this.#s.check();
    const { keys } = this.#s;
    const recorded = await this.#script(
      `record a failed delivery of ${JSON.stringify(key)}`,
      'record-failure',
      [keys.schedules, keys.due],
      [key, String(version), String(failure.attempts), String(failure.dueAt.getTime())],
    );
    return recorded === 1;
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    return this.#s.watcher.watch(onChange);
  }

  async close(): Promise<void> {
    for (const tx of [...this.#open]) tx.abandon();
    this.#open.clear();
    this.#s.watcher.close();
  }

  /**
   * Applies a transaction's operations with one `commit` script call. Each commit carries a random id; the
   * script records it (a marker key that expires after `markerTtl`) when it applies the operations, so
   * when a reply is lost to a dropped connection and the call is sent again (by this retry loop, or by
   * ioredis resending unanswered commands after reconnecting), the second run sees the marker and applies
   * nothing. Transient failures are retried with backoff for `commitRetryWindow`.
   */
  async commit(ops: StoreOp[], claims?: { value: string; keys: ReadonlySet<string> }): Promise<void> {
    this.#s.check();
    const { keys } = this.#s;
    const commitId = randomBytes(12).toString('base64url');
    const scriptKeys = [keys.schedules, keys.due, keys.at, keys.index, keys.version, keys.marker(commitId)];
    const indexOf = (key: string) => {
      const found = scriptKeys.indexOf(key, 6);
      if (found >= 0) return found + 1;
      scriptKeys.push(key);
      return scriptKeys.length;
    };
    const args: (string | number)[] = [this.#s.markerTtl, keys.channel, this.#s.senderId];
    for (const op of ops) {
      switch (op.op) {
        case 'append':
          args.push(
            'append',
            indexOf(keys.events(op.aggregateId)),
            op.aggregateId,
            op.expectedSequence,
            op.events.length,
            ...op.events.map(encodeEvent),
          );
          break;
        case 'put':
          args.push('put', op.key, String(op.at.getTime()), encodeMessage(op.message));
          break;
        case 'delete':
          args.push('delete', op.key);
          break;
        case 'deletePrefix':
          args.push('prefix', op.prefix);
          break;
        case 'consume': {
          const claimed = claims?.keys.has(op.key) === true;
          args.push(
            'consume',
            op.key,
            String(op.version),
            claimed ? indexOf(keys.claim(op.key)) : 0,
            claimed ? claims!.value : '',
          );
          break;
        }
      }
    }
    const reply = (await this.#withRetry('commit', () => this.#s.runner.run('commit', scriptKeys, args))) as [
      string,
      string?,
      string?,
    ];
    if (reply[0] === 'ok') return;
    if (reply[0] === 'duplicate') {
      this.#s.logger.debug('redis commit was already applied; a resend was recognised', { commitId });
      return;
    }
    if (reply[0] === 'conflict' && (reply[1] === 'aggregate' || reply[1] === 'schedule'))
      throw new ConflictError(reply[1], String(reply[2]));
    throw new BackendError('commit', `unexpected reply from the commit script: ${JSON.stringify(reply)}`);
  }

  /** Claims `key` at `version` for a delivery (see {@link ClaimingTransaction}). */
  async claim(key: string, version: number, value: string, ttlMs: number): Promise<ClaimOutcome> {
    this.#s.check();
    const { keys } = this.#s;
    const reply = (await this.#script(
      `claim schedule ${JSON.stringify(key)}`,
      'claim',
      [keys.schedules, keys.claim(key)],
      [key, String(version), value, ttlMs],
    )) as [number, string?];
    if (reply[0] === 1) return { claimed: decodeSchedule(key, reply[1], keys.schedules) };
    return reply[0] === 0 ? 'stale' : 'taken';
  }

  async renewClaims(scheduleKeys: readonly string[], value: string, ttlMs: number): Promise<number> {
    const claimKeys = scheduleKeys.map((k) => this.#s.keys.claim(k));
    return Number(await this.#script('renew claims', 'claim-renew', claimKeys, [value, ttlMs]));
  }

  async releaseClaims(scheduleKeys: readonly string[], value: string): Promise<void> {
    const claimKeys = scheduleKeys.map((k) => this.#s.keys.claim(k));
    await this.#script('release claims', 'claim-release', claimKeys, [value]);
  }

  async #read<T>(operation: string, key: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw mapRedisError(error, operation, this.#s.target, key);
    }
  }

  async #script(
    operation: string,
    name: Parameters<ScriptRunner['run']>[0],
    keys: string[],
    args: (string | number)[],
  ): Promise<unknown> {
    try {
      return await this.#s.runner.run(name, keys, args);
    } catch (error) {
      throw mapRedisError(error, operation, this.#s.target);
    }
  }

  async #withRetry<T>(operation: string, call: () => Promise<T>): Promise<T> {
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await call();
      } catch (error) {
        const mapped = mapRedisError(error, operation, this.#s.target);
        const elapsed = Date.now() - started;
        const delay = Math.min(1000, 25 * 2 ** attempt) * (0.5 + Math.random() / 2);
        if (!isTransient(mapped)) throw mapped;
        if (elapsed + delay > this.#s.commitRetryWindow)
          throw new BackendError(
            operation,
            `gave up after ${attempt} attempts in ${elapsed} ms (${mapped.message}); the commit was not confirmed: if an attempt reached the server it applied once, otherwise not at all`,
            { cause: mapped, transient: true },
          );
        this.#s.logger.warn('redis commit failed; retrying', {
          attempt,
          retryInMs: Math.round(delay),
          error: mapped,
        });
        await new Promise((resolve) => setTimeout(resolve, delay));
        this.#s.check();
      }
    }
  }
}
