export type { DeadLetterView, GroupView, RecurrenceView, ScheduleView } from './api.js';
export {
  createDashboard,
  type DashboardDispatcher,
  type DashboardGroup,
  type DashboardHandler,
  type DashboardOptions,
} from './handler.js';
export type { LatenessSample } from './sampler.js';
export { isLoopback, redactText, sameSecret } from './security.js';
export { type RunningDashboard, type StartDashboardOptions, startDashboard } from './server.js';
