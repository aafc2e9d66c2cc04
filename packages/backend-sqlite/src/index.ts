export type { SqliteBackendOptions, SqliteTarget } from './options.js';
export { LATEST_SCHEMA_VERSION } from './sql/migrations.js';
export { APPLICATION_ID } from './sql/tables.js';
export { createSqliteBackend, type SqliteBackend } from './sqlite-backend.js';
