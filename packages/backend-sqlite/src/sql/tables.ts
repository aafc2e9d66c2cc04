/** duetime's table and index names under one prefix (validated: letters, digits and `_`). */
export interface Tables {
  prefix: string;
  meta: string;
  events: string;
  schedules: string;
  leases: string;
  cursors: string;
  deadLetters: string;
  /** Delivery claims: which version a delivery holds, and until when (see the store adapter). */
  claims: string;
}

export function tables(prefix: string): Tables {
  return {
    prefix,
    meta: `${prefix}meta`,
    events: `${prefix}events`,
    schedules: `${prefix}schedules`,
    leases: `${prefix}leases`,
    cursors: `${prefix}cursors`,
    deadLetters: `${prefix}dead_letters`,
    claims: `${prefix}claims`,
  };
}

/** Written to `PRAGMA application_id` of a database file duetime created ("DuTm"). */
export const APPLICATION_ID = 0x4475546d;

/** The `format` row of the meta table, telling duetime's meta table from a stranger's. */
export const FORMAT = 'duetime';

/** Meta rows. */
export const META = {
  format: 'format',
  schemaVersion: 'schema_version',
  /** The store-wide schedule version counter (only grows). */
  scheduleVersion: 'schedule_version',
} as const;
