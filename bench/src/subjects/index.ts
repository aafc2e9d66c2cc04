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

export function subjectByName(name: string): Subject {
  const subject = allSubjects().find((s) => s.name === name);
  if (!subject) throw new Error(`unknown bench subject ${name}`);
  return subject;
}
