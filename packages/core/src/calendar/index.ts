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
} from './decide/admission.js';
export {
  advancesCursor,
  type FinishedRecord,
  type Origin,
  Reason,
  type ScheduleRecord,
  State,
} from './decide/records.js';
export {
  calendarOccurrences,
  type StoreTargetMessage,
  type StoreTargetOptions,
  storeTarget,
  storeTargetKey,
} from './decide/store-target.js';
export {
  type ResolvedConfig,
  resolveConfig,
  SCHEDULER_DEFAULTS,
  type SchedulerConfig,
} from './declare/config.js';
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
} from './declare/declarations.js';
export {
  DEFAULT_CATCH_UP_MAX,
  DEFAULT_OVERLAP_TTL,
  type FailedHook,
  type Hook,
  type NormalizedOptions,
  type ScheduleOptions,
  type WhenPredicate,
} from './declare/options.js';
export { DuplicateIdError, isRegistry, Registry } from './declare/registry.js';
export {
  currentInvocation,
  type Handler,
  type HandlerContext,
  type Invocation,
  type OccurrenceScope,
  occurrenceId,
} from './run/invocation.js';
export { RunAbortedError } from './run/runner.js';
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
