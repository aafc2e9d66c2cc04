import type { Logger } from '@duetime/core';
import type { StoredMessage } from '../io.js';
import { type DuePair, toPairs } from './records.js';

/** Helpers of the due index (see due.ts). */

/** Inserts `value` into the ascending `list` unless it is there. */
export function insertSorted(list: number[], value: number): void {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((list[mid] as number) < value) lo = mid + 1;
    else hi = mid;
  }
  if (list[lo] !== value) list.splice(lo, 0, value);
}

/** One pair of one entry message: a stale pair never turns live again, but the same pair in a later entry may be live. */
export function pairId(entrySeq: number, key: string, due: number): string {
  return `${entrySeq}\u0000${due}\u0000${key}`;
}

export function safePairs(m: StoredMessage, logger: Logger): DuePair[] {
  try {
    return toPairs(m).filter(
      (p): p is DuePair => Array.isArray(p) && typeof p[0] === 'string' && typeof p[1] === 'number',
    );
  } catch (error) {
    logger.warn('nats store: a due-index message is not readable; ignored', {
      subject: m.subject,
      seq: m.seq,
      error,
    });
    return [];
  }
}
