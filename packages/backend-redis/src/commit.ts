import type { Settlement, Write } from '@duetime/core';
import { encodeDeadLetter, encodeState } from './codec.js';
import type { KeySpace } from './keys.js';
import type { Arg } from './scripts.js';

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
 * commit's marker and the event lists the groups append to, then the unit's claim token and claimed keys
 * (their claims end) and the groups' operations, each group applied all or nothing. `groups` builds them
 * with the KEYS index of each event list.
 */
export function encodeCommit(
  settings: { keys: KeySpace; markerTtl: number; senderId: string },
  commitId: string,
  request: { token: string; claimed: readonly string[] },
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
