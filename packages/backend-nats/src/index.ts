export * from './connection.js';
export * from './jetstream-scheduler/index.js';
export type { MigrationReport } from './migrate.js';
export {
  createNatsBackend,
  createNatsCoordination,
  deleteNatsBackendData,
  LegacyStoreError,
  migrateNatsStore,
  type NatsBackend,
  type NatsBackendOptions,
  type NatsCoordination,
  type NatsTarget,
  STORE_MIN_SERVER,
} from './nats-backend.js';
export { TransactionTooLargeError } from './store/limits.js';
export { StreamMismatchError } from './streams.js';
