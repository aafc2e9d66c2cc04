export * from './backend/contract.js';
export {
  checkSchemaVersion,
  type DeadLetterFields,
  decodeDeadLetter,
  decodeEvent,
  decodeJson,
  decodeSchedule,
  type EventFields,
  type ScheduleFields,
  type SchemaVersionSpec,
} from './backend/decode.js';
export {
  type BackendDefinition,
  type CommonBackendOptions,
  defineBackend,
  type OpenContext,
  type OpenedBackend,
  type OptionReader,
  optionReader,
} from './backend/define.js';
export {
  refuseTransactionControl,
  type SqlExecutor,
  type SqlResult,
  type TransactionRunner,
  transactionControl,
} from './backend/sql.js';
export * from './backend.js';
export { DueHeap, type HeapItem } from './calendar/decide/heap.js';
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
export { MAX_BACKFILL, MAX_QUEUED, type ResumeResult } from './store/operations.js';
export { decodePreview } from './store/paging.js';
export {
  type CatchUp,
  describeStoredRecurrence,
  isOneShot,
  isRecurrence,
  PAUSED_DUE,
  type QueuedDelivery,
  type Recurrence,
  type RecurrenceOptions,
  readRecurrence,
  recurring,
  recurringOccurrenceId,
  type ScheduleControl,
  type StoredOneShot,
  type StoredRecurrence,
  type StoredSpec,
  type StoredState,
  specOf,
  stateOf,
  upcomingOccurrences,
} from './store/recurrence.js';
export {
  createStore,
  type Store,
  type StoreOptions,
  type Transaction,
  type TransactOptions,
  validMessage,
} from './store/store.js';
export * from './store/types.js';
export { configureTelemetry } from './telemetry/binding.js';
export { activeTrace } from './telemetry/context.js';
export {
  INSTRUMENTATION_SCOPE,
  SECONDS_BUCKETS,
} from './telemetry/delivery.js';
export * from './telemetry/otel.js';
export * from './time/index.js';
export * from './validate.js';
