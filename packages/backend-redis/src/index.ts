export { parseRedisUrl, type RedisUrl } from './connection.js';
export { KeySpace, MAX_PREFIX_LENGTH, storePrefix } from './keys.js';
export { createRedisBackend, type RedisBackendOptions, type RedisConnection } from './redis-backend.js';
export type { RedisClient } from './scripts.js';
