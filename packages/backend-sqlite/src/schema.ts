import { BackendError, CorruptDataError, type Logger, NotFoundError, NotSupportedError } from '@duetime/core';
import type Database from 'better-sqlite3';
import type { SqliteConnection } from './connection.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './sql/migrations.js';
import { APPLICATION_ID, FORMAT, META, type Tables } from './sql/tables.js';
import { prepare } from './statements.js';

/**
 * Makes the database ready: WAL mode for files duetime opens, then, inside one `BEGIN IMMEDIATE`
 * transaction (so processes starting together take turns), checks what the file holds and applies the
 * missing migrations.
 *
 * The rule for foreign data: duetime creates its tables only in
 * 1. an empty database (then it also stamps `PRAGMA application_id`),
 * 2. a database already holding duetime's meta table under this prefix, or stamped as duetime's, or
 * 3. a connection the application passed as `{ database }` (its own database, by its own choice).
 * A file opened by name that holds other tables, or carries another application's id, is refused with a
 * CorruptDataError naming it. Nothing is ever dropped or reset. A schema newer than this code knows is
 * refused with a BackendError, and the file is left untouched.
 */
export async function prepareSchema(
  connection: SqliteConnection,
  t: Tables,
  source: 'filename' | 'database',
  options: { synchronous: 'full' | 'normal'; logger: Logger; migrate: boolean },
): Promise<number> {
  const { writer, file } = connection;
  if (!options.migrate) return connection.read('check the schema', (db) => checkSchema(db, t, file));
  if (source === 'filename' && !connection.memory) {
    const mode = await connection.retryWhileBusy('enable WAL mode', () =>
      writer.pragma('journal_mode = WAL', { simple: true }),
    );
    if (mode !== 'wal')
      options.logger.warn('SQLite refused WAL mode; readers and writers will wait for each other', {
        file,
        mode,
      });
    writer.pragma(`synchronous = ${options.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
  } else if (!connection.memory) {
    const mode = writer.pragma('journal_mode', { simple: true });
    if (mode !== 'wal')
      options.logger.warn(
        'the database passed as { database } is not in WAL mode; readers and writers will wait for each other',
        { file, mode },
      );
  }
  return connection.write('prepare the schema', (db) => migrate(db, t, source, file));
}

function migrate(db: Database.Database, t: Tables, source: 'filename' | 'database', file: string): number {
  const encoding = db.pragma('encoding', { simple: true });
  if (encoding !== 'UTF-8')
    throw new NotSupportedError(
      `${file} uses the ${String(encoding)} text encoding; duetime needs UTF-8 (its key order and prefix ranges rely on it)`,
    );
  const applicationId = Number(db.pragma('application_id', { simple: true }));
  const names = userTables(db);
  if (!names.includes(t.meta)) {
    const partial = [t.events, t.schedules, t.leases, t.cursors].filter((n) => names.includes(n));
    if (partial.length > 0)
      throw new CorruptDataError(
        `${file} holds ${partial.join(', ')} but no ${t.meta}: not a complete duetime schema; refusing to change it`,
      );
    const stampedByOthers = applicationId !== 0 && applicationId !== APPLICATION_ID;
    const othersTables = names.length > 0 && applicationId !== APPLICATION_ID;
    if (source === 'filename' && (stampedByOthers || othersTables))
      throw new CorruptDataError(
        `${file} is not a duetime database: ${
          stampedByOthers
            ? `its application_id is 0x${applicationId.toString(16)}`
            : `it holds another application's tables (${names.slice(0, 5).join(', ')}${names.length > 5 ? ', …' : ''})`
        } and no ${t.meta}. duetime creates its tables only in an empty file, a file it created, or a connection you pass as { database }; the file was left untouched`,
      );
    if (names.length === 0 && applicationId === 0) db.pragma(`application_id = ${APPLICATION_ID}`);
    db.exec(`CREATE TABLE ${t.meta} (name TEXT NOT NULL PRIMARY KEY, value)`);
    const insert = db.prepare(`INSERT INTO ${t.meta} (name, value) VALUES (?, ?)`);
    insert.run(META.format, FORMAT);
    insert.run(META.schemaVersion, 0);
  }
  const read = prepare(db, `SELECT value FROM ${t.meta} WHERE name = ?`).pluck();
  if (read.get(META.format) !== FORMAT)
    throw new CorruptDataError(
      `${file}: table ${t.meta} exists but is not duetime's (no format row); refusing to change it`,
    );
  const version = read.get(META.schemaVersion);
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 0)
    throw new CorruptDataError(
      `${file}: ${t.meta} holds an unreadable schema version ${JSON.stringify(version)}`,
    );
  if (version > LATEST_SCHEMA_VERSION)
    throw new BackendError(
      `open (${file})`,
      `the database was written by a newer duetime (schema version ${version}; this @duetime/backend-sqlite knows up to ${LATEST_SCHEMA_VERSION}); upgrade the package. The file was left untouched`,
    );
  const record = db.prepare(`UPDATE ${t.meta} SET value = ? WHERE name = ?`);
  for (const migration of MIGRATIONS) {
    if (migration.version <= version) continue;
    db.exec(migration.sql(t));
    record.run(migration.version, META.schemaVersion);
  }
  const present = userTables(db);
  const missing = [t.events, t.schedules, t.leases, t.cursors].filter((n) => !present.includes(n));
  if (missing.length > 0 || typeof read.get(META.scheduleVersion) !== 'number')
    throw new CorruptDataError(
      `${file}: duetime schema version ${Math.max(version, LATEST_SCHEMA_VERSION)} is recorded, but ${
        missing.length > 0
          ? `tables ${missing.join(', ')} are missing`
          : 'the schedule version counter is missing'
      }`,
    );
  return LATEST_SCHEMA_VERSION;
}

/**
 * With `migrate: false`: reads what the database holds and changes nothing. Tables that are not there are a
 * NotFoundError; an older schema is a BackendError saying how to migrate it; a newer one is refused.
 */
function checkSchema(db: Database.Database, t: Tables, file: string): number {
  if (!userTables(db).includes(t.meta))
    throw new NotFoundError(
      `duetime tables in ${file}`,
      `no duetime tables with the prefix ${JSON.stringify(t.prefix)} in ${file}`,
    );
  const read = prepare(db, `SELECT value FROM ${t.meta} WHERE name = ?`).pluck();
  if (read.get(META.format) !== FORMAT)
    throw new CorruptDataError(`${file}: table ${t.meta} exists but is not duetime's (no format row)`);
  const version = read.get(META.schemaVersion);
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 0)
    throw new CorruptDataError(
      `${file}: ${t.meta} holds an unreadable schema version ${JSON.stringify(version)}`,
    );
  if (version > LATEST_SCHEMA_VERSION)
    throw new BackendError(
      `open (${file})`,
      `the database was written by a newer duetime (schema version ${version}; this @duetime/backend-sqlite knows up to ${LATEST_SCHEMA_VERSION}); upgrade the package`,
    );
  if (version < LATEST_SCHEMA_VERSION)
    throw new BackendError(
      `open (${file})`,
      `duetime's tables are at schema version ${version}, this package needs ${LATEST_SCHEMA_VERSION}; open it once with migrate: true (the default) to migrate`,
    );
  return version;
}

function userTables(db: Database.Database): string[] {
  return db
    .prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND substr(name, 1, 7) <> 'sqlite_' ORDER BY name",
    )
    .pluck()
    .all() as string[];
}
