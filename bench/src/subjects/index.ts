import { bullmq, bullmqSchedulers } from './bullmq.js';
import { DUETIME_BACKENDS, duetime, duetimeRecurring, SCALEOUT_TARGETS } from './duetime.js';
import { graphileWorker } from './graphile-worker.js';
import { pgBoss, pgBossSchedules } from './pg-boss.js';
import type { RecurringSubject, Subject } from './types.js';

/**
 * Every library and backend under comparison, duetime first; each peer twice, at its defaults and at its
 * documented best for this kind of work (see each subject's file).
 */
export function allSubjects(): Subject[] {
  return [
    duetime('sqlite'),
    duetime('postgres'),
    duetime('redis'),
    duetime('nats'),
    pgBoss('defaults'),
    pgBoss('best'),
    graphileWorker('defaults'),
    graphileWorker('best'),
    bullmq('defaults'),
    bullmq('best'),
  ];
}

/**
 * Settings variants of duetime measured where the setting matters (enqueue and drain): SQLite with
 * `synchronous: 'normal'` (a process crash loses nothing, a power loss may lose the last commits).
 */
export function variantSubjects(): Subject[] {
  return [duetime('sqlite', { synchronous: 'normal' })];
}

/**
 * The telemetry workload's subjects: duetime on SQLite (`synchronous: 'normal'`) with telemetry off (the
 * baseline: what an application without `@opentelemetry/api` runs), at its default, with the API's no-op
 * tracer, and with a listener on every dispatcher event.
 */
export function telemetrySubjects(): Subject[] {
  // synchronous 'normal': the drain then waits on the processor, not on an fsync per batch, so what the
  // telemetry adds per message shows.
  const synchronous = 'normal';
  return [
    duetime('sqlite', { synchronous, telemetry: 'off' }),
    duetime('sqlite', { synchronous }),
    duetime('sqlite', { synchronous, telemetry: 'noop' }),
    duetime('sqlite', { synchronous, telemetry: 'events' }),
  ];
}

/**
 * The recurring workload's subjects: duetime's recurring schedules on every backend, BullMQ's job
 * schedulers and pg-boss's `schedule()`, each peer at its defaults and at its best (named like the queue
 * subjects of the same library and server).
 */
export function recurringSubjects(): RecurringSubject[] {
  return [
    ...DUETIME_BACKENDS.map((kind) => duetimeRecurring(kind)),
    pgBossSchedules('defaults'),
    pgBossSchedules('best'),
    bullmqSchedulers('defaults'),
    bullmqSchedulers('best'),
  ];
}

export function recurringSubjectByName(name: string): RecurringSubject {
  const subject = recurringSubjects().find((s) => s.name === name);
  if (!subject) throw new Error(`unknown recurring bench subject ${name}`);
  return subject;
}

/**
 * Every subject name `--subjects` accepts: the queue subjects, their variants and the telemetry
 * workload's, and the scaleout workload's servers (`duetime/redis-cluster`, `duetime/nats-cluster` besides
 * the backends' own names). The recurring workload's subjects are named like the queue subjects.
 */
export function subjectNames(): string[] {
  return [
    ...new Set([
      ...[...allSubjects(), ...variantSubjects(), ...telemetrySubjects()].map((s) => s.name),
      ...SCALEOUT_TARGETS.map((target) => `duetime/${target}`),
    ]),
  ];
}

export function subjectByName(name: string): Subject {
  const subject = [...allSubjects(), ...variantSubjects(), ...telemetrySubjects()].find(
    (s) => s.name === name,
  );
  if (!subject) throw new Error(`unknown bench subject ${name}`);
  return subject;
}
