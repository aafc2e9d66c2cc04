import { bullmq } from './bullmq.js';
import { duetime } from './duetime.js';
import { graphileWorker } from './graphile-worker.js';
import { pgBoss } from './pg-boss.js';
import type { Subject } from './types.js';

/** Every library and backend under comparison, duetime first. */
export function allSubjects(): Subject[] {
  return [
    duetime('sqlite'),
    duetime('postgres'),
    duetime('redis'),
    duetime('nats'),
    pgBoss,
    graphileWorker,
    bullmq,
  ];
}

/**
 * Settings variants of duetime measured where the setting matters (enqueue and drain): SQLite with
 * `synchronous: 'normal'` (a process crash loses nothing, a power loss may lose the last commits).
 */
export function variantSubjects(): Subject[] {
  return [duetime('sqlite', { synchronous: 'normal' })];
}

export function subjectByName(name: string): Subject {
  const subject = [...allSubjects(), ...variantSubjects()].find((s) => s.name === name);
  if (!subject) throw new Error(`unknown bench subject ${name}`);
  return subject;
}
