export { KeySpace } from './keys.js';
export { createRedisBackend, type RedisBackendOptions, type RedisConnection } from './redis-backend.js';
export type { RedisClient } from './scripts.js';
