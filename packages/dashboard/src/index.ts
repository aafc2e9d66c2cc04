export {
  createDashboard,
  type DashboardDispatcher,
  type DashboardGroup,
  type DashboardHandler,
  type DashboardOptions,
  type DeadLetterView,
  type GroupView,
  type RecurrenceView,
  type ScheduleView,
} from './handler.js';
export type { LatenessSample } from './sampler.js';
export { isLoopback, redactText, sameSecret } from './security.js';
export { type RunningDashboard, type StartDashboardOptions, startDashboard } from './server.js';
