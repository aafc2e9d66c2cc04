export * from './connection.js';
export * from './jetstream-scheduler/index.js';
export {
  createNatsBackend,
  deleteNatsBackendData,
  type NatsBackend,
  type NatsBackendOptions,
  type NatsTarget,
} from './nats-backend.js';
