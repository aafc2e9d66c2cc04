import {
  BackendError,
  backoff,
  type Changes,
  type Clock,
  ConflictError,
  type ConflictKind,
  isTransient,
  type Logger,
  retry,
  type Settlement,
  type Write,
} from '@duetime/core';
import { encodeDeadLetter, encodeState } from './codec.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import type { ScriptRunner } from './scripts.js';

type Arg = string | number;

const KINDS: ReadonlySet<string> = new Set(['aggregate', 'schedule', 'version']);

export interface CommitSettings {
  runner: ScriptRunner;
  keys: KeySpace;
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  clock: Clock;
  /** Identifies this instance in change notifications and commit ids. */
  senderId: string;
  /** How long a commit keeps retrying through connection loss, in ms. */
  commitTimeoutMs: number;
  /** How long a commit's marker lives, in ms (longer than the retry window). */
  markerTtl: number;
}

/** What one `commit` script call applies: groups of operations, and the claims that end with it. */
export interface CommitRequest {
  /** Groups, each applied all or nothing, independently of the others, in order. */
  groups: readonly (readonly Arg[])[];
  /** The unit's claim token ('' for none). */
  token: string;
  /** The keys the unit claimed: their claims end. */
  claimed: readonly string[];
}

/** The script operations of `writes` (see src/lua/commit.lua); `list` gives an event list's KEYS index. */
export function encodeWrites(
  writes: readonly Write[],
  list: (aggregateId: string) => number,
  args: Arg[] = [],
): Arg[] {
  for (const w of writes) {
    switch (w.op) {
      case 'append':
        args.push('append', list(w.aggregateId), w.aggregateId, w.expectedSequence, w.events.length);
        for (const event of w.events) args.push(JSON.stringify(event));
        break;
      case 'put': {
        const at = w.at.getTime();
        args.push('put', w.key, at, w.dueAt?.getTime() ?? at, ...encodeState(w.recurrence));
        args.push(JSON.stringify(w.message), w.ifVersion ?? '');
        break;
      }
      case 'delete':
        args.push('delete', w.key);
        break;
      case 'deletePrefix':
        args.push('prefix', w.prefix);
        break;
      case 'deleteDead':
        args.push('undead', w.key);
        break;
    }
  }
  return args;
}

/** The script operations of one settlement and its writes. */
export function encodeSettlement(s: Settlement, list: (aggregateId: string) => number): Arg[] {
  const { key, version } = s.schedule;
  const args: Arg[] = [];
  if (s.outcome === 'consume') {
    args.push('consume', key, version);
    if (s.dead) args.push('dead', key, encodeDeadLetter({ ...s.schedule, ...s.dead }));
  } else if (s.outcome === 'retry' && s.failure) {
    const { attempts, dueAt, error, at } = s.failure;
    args.push('fail', key, version, attempts, dueAt.getTime(), at ? at.getTime() : '', error);
  }
  encodeWrites(s.writes, list, args);
  if (s.outcome === 'consume' && s.next) {
    const at = s.next.at.getTime();
    args.push('next', key, at, s.next.dueAt?.getTime() ?? at, ...encodeState(s.next.recurrence));
    args.push(JSON.stringify(s.schedule.message));
  }
  return args;
}

/**
 * The `commit` script's KEYS and ARGV (see src/lua/commit.lua for their layout): the store's keys, the
 * commit's marker and the event lists the groups append to, then the groups' operations. `groups` builds
 * them with the KEYS index of each event list.
 */
export function encodeCommit(
  settings: Pick<CommitSettings, 'keys' | 'markerTtl' | 'senderId'>,
  commitId: string,
  request: Omit<CommitRequest, 'groups'>,
  groups: (list: (aggregateId: string) => number) => readonly (readonly Arg[])[],
): { keys: string[]; args: Arg[] } {
  const { keys } = settings;
  const scriptKeys = [
    ...[keys.schedules, keys.due, keys.at, keys.index, keys.version, keys.marker(commitId)],
    ...[keys.claims, keys.dead, keys.deadIndex],
  ];
  const lists = new Map<string, number>();
  const list = (aggregateId: string) => {
    let index = lists.get(aggregateId);
    if (index === undefined) {
      index = scriptKeys.push(keys.events(aggregateId));
      lists.set(aggregateId, index);
    }
    return index;
  };
  const args: Arg[] = [settings.markerTtl, keys.channel, settings.senderId, request.token];
  args.push(request.claimed.length, ...request.claimed);
  for (const group of groups(list)) {
    args.push('group');
    for (const arg of group) args.push(arg);
  }
  return { keys: scriptKeys, args };
}

/**
 * Sends commits to the `commit` script. Each commit carries an id unique to this backend instance; the
 * script records it (a marker key that expires after `markerTtl`, holding which groups were left out) with
 * the changes, so when a reply is lost to a dropped connection and the call is sent again (by the retry
 * here, or by ioredis resending unanswered commands after reconnecting), the second run finds the marker,
 * applies nothing and answers as the first did. Transient failures are retried for `commitTimeoutMs`.
 */
export class Committer {
  readonly #s: CommitSettings;
  #commits = 0;

  constructor(settings: CommitSettings) {
    this.#s = settings;
  }

  /**
   * Applies `changes` in one script call: the plain writes as the first group (their conflict is thrown),
   * then one group per settlement; returns the conflicts that left settlements out, by key.
   */
  async commit(token: string, claimed: readonly string[], changes: Changes): Promise<Map<string, Error>> {
    const rejected = new Map<string, Error>();
    const plain = changes.writes.length > 0;
    if (!plain && changes.settlements.length === 0) return rejected;
    const commitId = `${this.#s.senderId}.${(++this.#commits).toString(36)}`;
    const { keys, args } = encodeCommit(this.#s, commitId, { token, claimed }, (list) => [
      ...(plain ? [encodeWrites(changes.writes, list)] : []),
      ...changes.settlements.map((s) => encodeSettlement(s, list)),
    ]);
    const reply = await this.#send(keys, args);
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

  #send(keys: string[], args: Arg[]): Promise<unknown> {
    const { runner, target, logger } = this.#s;
    return retry(
      async (attempt) => {
        try {
          return await runner.run('commit', keys, args);
        } catch (error) {
          const mapped = mapRedisError(error, 'commit', target);
          if (isTransient(mapped)) logger.warn('redis commit failed; retrying', { attempt, error: mapped });
          throw mapped;
        }
      },
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
}
