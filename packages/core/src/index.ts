export * from './backend.js';
export { DueHeap, type HeapItem } from './calendar/heap.js';
export * from './calendar/index.js';
export * from './clock.js';
export * from './dispatch/dispatcher.js';
export * from './errors.js';
export * from './events.js';
export * from './factory/index.js';
export * from './lease/lease-manager.js';
export * from './lease/monotonic.js';
export * from './lease/types.js';
export * from './logger.js';
export * from './memory/memory-backend.js';
export * from './run-loop.js';
export * from './store/aggregate.js';
export * from './store/buffered.js';
export * from './store/driver.js';
export {
  type CatchUp,
  describeStoredRecurrence,
  isRecurrence,
  type Recurrence,
  type RecurrenceOptions,
  readRecurrence,
  recurring,
  recurringOccurrenceId,
  type StoredRecurrence,
  type StoredSpec,
  specOf,
  upcomingOccurrences,
} from './store/recurrence.js';
export * from './store/store.js';
export * from './store/types.js';
export { activeTrace } from './telemetry/context.js';
export {
  INSTRUMENTATION_SCOPE,
  SECONDS_BUCKETS,
} from './telemetry/delivery.js';
export * from './telemetry/otel.js';
export * from './time/index.js';
export * from './validate.js';
