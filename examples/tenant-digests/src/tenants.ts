import { type Handlers, type MessageOf, parseCron, recurring, type Store } from '@duetime/core';
import type pg from 'pg';

/** The messages this service schedules. */
export type DigestMessages = {
  'digest.send': { tenantId: string };
};

/** The application's own tables, next to duetime's schema. */
export async function createTables(client: pg.ClientBase, schema: string): Promise<void> {
  await client.query(`
    CREATE TABLE IF NOT EXISTS "${schema}".tenants (id text PRIMARY KEY, name text NOT NULL, zone text NOT NULL);
    CREATE TABLE IF NOT EXISTS "${schema}".outbox (
      occurrence_id text PRIMARY KEY,
      tenant_id text NOT NULL,
      due_at timestamptz NOT NULL,
      local_time text NOT NULL
    );`);
}

export const digestKey = (tenantId: string) => `tenant/${tenantId}/digest`;

/** Every Monday at 09:00 on the tenant's wall clock, whatever DST does there. */
export const digestRecurrence = (zone: string, startAt: Date) =>
  recurring(parseCron('0 9 * * MON', zone), { startAt, catchUp: 'latest' });

/** Signs a tenant up: its row and its weekly digest commit together, or neither does. */
export async function addTenant(
  store: Store<pg.PoolClient>,
  schema: string,
  tenant: { id: string; name: string; zone: string },
  startAt: Date,
): Promise<void> {
  await store.transact(async (tx) => {
    await tx.sql.query(`INSERT INTO "${schema}".tenants (id, name, zone) VALUES ($1, $2, $3)`, [
      tenant.id,
      tenant.name,
      tenant.zone,
    ]);
    const message: MessageOf<DigestMessages> = { type: 'digest.send', data: { tenantId: tenant.id } };
    await tx.schedule(digestKey(tenant.id), digestRecurrence(tenant.zone, startAt), message);
  });
}

/** A tenant moves: its zone and its digest's recurrence change in one transaction. */
export async function moveTenant(
  store: Store<pg.PoolClient>,
  schema: string,
  tenantId: string,
  zone: string,
  startAt: Date,
): Promise<void> {
  await store.transact(async (tx) => {
    await tx.sql.query(`UPDATE "${schema}".tenants SET zone = $2 WHERE id = $1`, [tenantId, zone]);
    await tx.schedule(digestKey(tenantId), digestRecurrence(zone, startAt), {
      type: 'digest.send',
      data: { tenantId },
    });
  });
}

/** A tenant leaves: its row and every schedule under `tenant/<id>/` go in one transaction. */
export async function removeTenant(
  store: Store<pg.PoolClient>,
  schema: string,
  tenantId: string,
): Promise<number> {
  return store.transact(async (tx) => {
    await tx.sql.query(`DELETE FROM "${schema}".tenants WHERE id = $1`, [tenantId]);
    return tx.cancelSchedulePrefix(`tenant/${tenantId}/`);
  });
}

/**
 * A tenant's subscription lapses: its digest is paused (the row says why), not cancelled, so its grid,
 * its count and its zone survive until the tenant renews.
 */
export async function suspendTenant(store: Store<pg.PoolClient>, tenantId: string): Promise<boolean> {
  return store.transact((tx) => tx.pauseSchedule(digestKey(tenantId), { note: 'subscription lapsed' }));
}

/** The tenant renews: the digest resumes at its next Monday; the Mondays it missed are not sent. */
export async function reinstateTenant(store: Store<pg.PoolClient>, tenantId: string) {
  return store.transact((tx) => tx.resumeSchedule(digestKey(tenantId), { catchUp: 'skip' }));
}

/** Support sends a digest now, beside the weekly ones (its own occurrence id: the outbox keeps both). */
export async function sendDigestNow(store: Store<pg.PoolClient>, tenantId: string): Promise<string> {
  return store.transact((tx) => tx.triggerSchedule(digestKey(tenantId)));
}

/**
 * The digest handler: writes the digest to the outbox in the transaction that consumes the occurrence and
 * arms the next one. The occurrence id is the outbox's key, so even a digest whose commit failed after the
 * row was written cannot be sent twice.
 */
export function digestHandlers(
  schema: string,
  onSent: (tenantId: string, dueAt: Date, localTime: string, kind: string) => void,
): Handlers<DigestMessages, pg.PoolClient> {
  return {
    'digest.send': async (tx, message, { occurrence }) => {
      const { tenantId } = message.data!;
      const { rows } = await tx.sql.query<{ zone: string }>(
        `SELECT zone FROM "${schema}".tenants WHERE id = $1`,
        [tenantId],
      );
      const zone = rows[0]?.zone ?? 'UTC';
      const localTime = new Intl.DateTimeFormat('en-GB', {
        timeZone: zone,
        weekday: 'short',
        day: '2-digit',
        month: 'short',
        hour: '2-digit',
        minute: '2-digit',
        timeZoneName: 'short',
      }).format(occurrence!.at);
      await tx.sql.query(
        `INSERT INTO "${schema}".outbox (occurrence_id, tenant_id, due_at, local_time) VALUES ($1, $2, $3, $4)
         ON CONFLICT (occurrence_id) DO NOTHING`,
        [occurrence!.id, tenantId, occurrence!.at, localTime],
      );
      onSent(tenantId, occurrence!.at, localTime, occurrence!.kind ?? 'scheduled');
    },
  };
}
