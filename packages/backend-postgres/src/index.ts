/**
 * duetime on PostgreSQL: transactional schedules that commit with the application's own SQL, leases and
 * cursors judged by the database clock, LISTEN/NOTIFY wake-ups. See README.md.
 */

export type { PostgresExecutor } from './connection.js';
export { type ConnectionTarget, describeTarget } from './errors.js';
export type { TransactionRunner } from './hosted.js';
export type { MigrationResult } from './migrate.js';
export { type Migration, migrations, SCHEMA_VERSION } from './migrations/index.js';
export { channelFor } from './notifications.js';

export type { PostgresBackendOptions, PostgresConnection } from './options.js';
export type { PGliteLike, PGliteTransactionLike } from './pglite.js';
export { createPostgresBackend, migrate } from './postgres-backend.js';
