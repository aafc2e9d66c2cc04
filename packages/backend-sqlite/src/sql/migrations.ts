import type { Tables } from './tables.js';

/**
 * The schema, as numbered migrations. Each runs once, in order, inside the transaction that records the new
 * `schema_version`, so a crash or a second process starting at the same moment never sees half of one.
 * Never edit a released migration: add the next one.
 */
export interface Migration {
  version: number;
  description: string;
  sql(t: Tables): string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'events, schedules with due and deadline indices, leases, cursors',
    sql: (t) => `
      CREATE TABLE ${t.events} (
        aggregate_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        type TEXT NOT NULL,
        data TEXT,
        timestamp INTEGER NOT NULL,
        PRIMARY KEY (aggregate_id, sequence)
      );
      CREATE TABLE ${t.schedules} (
        key TEXT NOT NULL PRIMARY KEY,
        at INTEGER NOT NULL,
        due_at INTEGER NOT NULL,
        version INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        message TEXT NOT NULL,
        last_error TEXT
      );
      CREATE INDEX ${t.schedules}_due ON ${t.schedules} (due_at, key);
      CREATE INDEX ${t.schedules}_at ON ${t.schedules} (at, key);
      CREATE TABLE ${t.leases} (
        key TEXT NOT NULL PRIMARY KEY,
        owner TEXT,
        token INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      );
      CREATE TABLE ${t.cursors} (
        key TEXT NOT NULL PRIMARY KEY,
        at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      );
      INSERT INTO ${t.meta} (name, value) VALUES ('schedule_version', 0);
    `,
  },
  {
    version: 2,
    description: 'recurring schedules (recurrence JSON) and dead letters',
    sql: (t) => `
      ALTER TABLE ${t.schedules} ADD COLUMN recurrence TEXT;
      CREATE TABLE ${t.deadLetters} (
        key TEXT NOT NULL PRIMARY KEY,
        version INTEGER NOT NULL,
        at INTEGER NOT NULL,
        message TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error TEXT NOT NULL,
        dead_at INTEGER NOT NULL
      );
    `,
  },
  {
    version: 3,
    description: 'delivery claims that outlive their process, and a flag for recurring schedules',
    sql: (t) => `
      ALTER TABLE ${t.schedules} ADD COLUMN recurring INTEGER NOT NULL DEFAULT 0;
      UPDATE ${t.schedules} SET recurring = 1 WHERE recurrence IS NOT NULL;
      CREATE TABLE ${t.claims} (
        key TEXT NOT NULL PRIMARY KEY,
        version INTEGER NOT NULL,
        owner TEXT NOT NULL,
        claimed_until INTEGER NOT NULL
      );
    `,
  },
];

/** The newest schema version this code knows. */
export const LATEST_SCHEMA_VERSION = MIGRATIONS.at(-1)?.version ?? 0;
