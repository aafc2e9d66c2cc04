import { BackendError, ConflictError, isTransient, type Logger, type StoreOp } from '@duetime/core';
import { encodeDeadLetter, encodeEvent, encodeMessage } from './codec.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import type { ScriptRunner } from './scripts.js';

export interface CommitSettings {
  runner: ScriptRunner;
  keys: KeySpace;
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  /** Identifies this instance in change notifications and commit ids. */
  senderId: string;
  /** How long a commit keeps retrying through connection loss, in ms. */
  commitRetryWindow: number;
  /** How long a commit's marker lives, in ms (longer than the retry window). */
  markerTtl: number;
  /** Throws once the backend is closed. */
  check(): void;
}

/** What one `commit` script call applies. */
export interface CommitRequest {
  /** Groups of operations, each applied all or nothing, independently of the others, in order. */
  groups: readonly (readonly StoreOp[])[];
  /** The delivery's claim token ('' for a plain transaction). */
  token: string;
  /** Claimed schedule keys that no group consumes: their claims end and they are due again. */
  release: readonly string[];
}

/**
 * The `commit` script's KEYS and ARGV for one commit (see src/lua/commit.lua for their layout): the store's
 * keys, the commit's marker and the event lists the operations append to, then the groups' operations.
 */
export function encodeCommit(
  settings: Pick<CommitSettings, 'keys' | 'markerTtl' | 'senderId'>,
  commitId: string,
  request: CommitRequest,
): { keys: string[]; args: (string | number)[] } {
  const { keys } = settings;
  const scriptKeys = [
    keys.schedules,
    keys.due,
    keys.at,
    keys.index,
    keys.version,
    keys.marker(commitId),
    keys.claims,
    keys.dead,
    keys.deadIndex,
  ];
  let lists: Map<string, number> | undefined;
  const listIndex = (aggregateId: string) => {
    lists ??= new Map();
    let index = lists.get(aggregateId);
    if (index === undefined) {
      scriptKeys.push(keys.events(aggregateId));
      index = scriptKeys.length;
      lists.set(aggregateId, index);
    }
    return index;
  };
  const args: (string | number)[] = [
    settings.markerTtl,
    keys.channel,
    settings.senderId,
    request.token,
    request.release.length,
    ...request.release,
  ];
  for (const ops of request.groups) {
    args.push('group');
    for (const op of ops) {
      switch (op.op) {
        case 'append':
          args.push(
            'append',
            listIndex(op.aggregateId),
            op.aggregateId,
            op.expectedSequence,
            op.events.length,
          );
          for (const event of op.events) args.push(encodeEvent(event));
          break;
        case 'put':
          args.push(
            'put',
            op.key,
            op.at.getTime(),
            op.recurrence ? JSON.stringify(op.recurrence) : '',
            encodeMessage(op.message),
          );
          break;
        case 'rearm':
          args.push(
            'rearm',
            op.key,
            op.at.getTime(),
            JSON.stringify(op.recurrence),
            encodeMessage(op.message),
          );
          break;
        case 'delete':
          args.push('delete', op.key);
          break;
        case 'deletePrefix':
          args.push('prefix', op.prefix);
          break;
        case 'consume':
          args.push('consume', op.key, op.version);
          break;
        case 'fail':
          args.push(
            'fail',
            op.key,
            op.version,
            op.attempts,
            op.dueAt.getTime(),
            op.at ? op.at.getTime() : '',
            op.error,
          );
          break;
        case 'dead':
          args.push('dead', op.record.key, encodeDeadLetter(op.record));
          break;
        case 'deleteDead':
          args.push('undead', op.key);
          break;
      }
    }
  }
  return { keys: scriptKeys, args };
}

/**
 * Sends commits to the `commit` script. Each commit carries an id unique to this backend instance; the
 * script records it (a marker key that expires after `markerTtl`, holding which groups were left out) with
 * the changes, so when a reply is lost to a dropped connection and the call is sent again (by this retry
 * loop, or by ioredis resending unanswered commands after reconnecting), the second run finds the marker,
 * applies nothing and answers as the first did. Transient failures are retried with backoff for
 * `commitRetryWindow`.
 */
export class Committer {
  readonly #s: CommitSettings;
  #commits = 0;

  constructor(settings: CommitSettings) {
    this.#s = settings;
  }

  /** Applies one transaction's operations, all or nothing; throws the ConflictError that kept them out. */
  async transaction(ops: StoreOp[]): Promise<void> {
    const [conflict] = await this.groups({ groups: [ops], token: '', release: [] });
    if (conflict) throw conflict;
  }

  /** Applies a delivery's groups in one script call; returns, per group, the conflict that left it out. */
  async groups(request: CommitRequest): Promise<(ConflictError | undefined)[]> {
    this.#s.check();
    const commitId = `${this.#s.senderId}.${(++this.#commits).toString(36)}`;
    const { keys: scriptKeys, args } = encodeCommit(this.#s, commitId, request);
    const reply = await this.#withRetry(scriptKeys, args);
    const unexpected = () =>
      new BackendError('commit', `unexpected reply from the commit script: ${JSON.stringify(reply)}`);
    if (!Array.isArray(reply) || (reply.length - 1) % 3 !== 0) throw unexpected();
    if (reply[0] === 'duplicate')
      this.#s.logger.debug('redis commit was already applied; a resend was recognised', { commitId });
    else if (reply[0] !== 'ok') throw unexpected();
    const results: (ConflictError | undefined)[] = [];
    results.length = request.groups.length;
    for (let i = 1; i < reply.length; i += 3) {
      const group = Number(reply[i]);
      const kind = reply[i + 1];
      if (!(group >= 1 && group <= results.length) || (kind !== 'aggregate' && kind !== 'schedule'))
        throw unexpected();
      results[group - 1] = new ConflictError(kind, String(reply[i + 2]));
    }
    return results;
  }

  async #withRetry(keys: string[], args: (string | number)[]): Promise<unknown> {
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#s.runner.run('commit', keys, args);
      } catch (error) {
        const mapped = mapRedisError(error, 'commit', this.#s.target);
        const elapsed = Date.now() - started;
        const delay = Math.min(1000, 25 * 2 ** attempt) * (0.5 + Math.random() / 2);
        if (!isTransient(mapped)) throw mapped;
        if (elapsed + delay > this.#s.commitRetryWindow)
          throw new BackendError(
            'commit',
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
