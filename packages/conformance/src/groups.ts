/**
 * The groups of the conformance suite, in the order they run. Names only: importing this module loads no
 * test framework, so tools (the `duetime conformance` command) can check a group name before starting one.
 */
export const CONFORMANCE_GROUPS = [
  'schedules',
  'sharing',
  'dispatcher',
  'batches',
  'deadLetters',
  'recurring',
  'operations',
  'reads',
  'pushChannel',
  'transactionControl',
  'processes',
  'crashes',
  'leases',
  'cursors',
  'calendar',
  'calendarFailover',
] as const;

export type ConformanceGroup = (typeof CONFORMANCE_GROUPS)[number];
