export {
  type AdmissionPlan,
  type Candidate,
  type CatchUpPolicy,
  type FirstStartInput,
  type Folded,
  firstStartCursor,
  MAX_SEARCH_STEPS,
  MAX_STEPS,
  type PlanInput,
  planAdmission,
  type Timeline,
  timeline,
} from './admission.js';
export { type ResolvedConfig, resolveConfig, SCHEDULER_DEFAULTS, type SchedulerConfig } from './config.js';
export {
  Calendar,
  calendar,
  cron,
  Declaration,
  type DeclarationDescription,
  type DeclarationSource,
  define,
  every,
  MAX_SCHEDULE_ID_LENGTH,
} from './declarations.js';
export {
  currentInvocation,
  type Handler,
  type HandlerContext,
  type Invocation,
  type OccurrenceScope,
  occurrenceId,
} from './invocation.js';
export {
  DEFAULT_CATCH_UP_MAX,
  DEFAULT_OVERLAP_TTL,
  type FailedHook,
  type Hook,
  type NormalizedOptions,
  type ScheduleOptions,
  type WhenPredicate,
} from './options.js';
export {
  advancesCursor,
  type FinishedRecord,
  type Origin,
  Reason,
  type ScheduleRecord,
  State,
} from './records.js';
export { DuplicateIdError, isRegistry, Registry } from './registry.js';
export { RunAbortedError } from './runner.js';
export {
  type LeadershipEvent,
  SCHEDULER_EVENTS,
  Scheduler,
  type SchedulerDescription,
  type SchedulerEvents,
  type SchedulerSnapshot,
  type SchedulerState,
  type ScheduleSnapshot,
} from './scheduler.js';
export {
  calendarOccurrences,
  type StoreTargetMessage,
  type StoreTargetOptions,
  storeTarget,
  storeTargetKey,
} from './store-target.js';
