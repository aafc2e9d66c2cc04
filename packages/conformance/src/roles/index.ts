import type { Backend } from '@duetime/core';
import { calendarRoles } from './calendar.js';
import { storeRoles } from './store.js';

/** What a role gets: the backend it opened, the parent's arguments, and a signal aborted on SIGTERM. */
export interface RoleContext {
  backend: Backend;
  args: Record<string, unknown>;
  signal: AbortSignal;
}

export type Role = (context: RoleContext) => Promise<void>;

export const roles: Record<string, Role> = { ...storeRoles, ...calendarRoles };
