/**
 * Per-tenant weekly digests, each on its tenant's own wall clock, on PostgreSQL: a tenant's row and its
 * recurring digest are created, changed and cancelled in the same transactions; a lapsed subscription
 * pauses the digest and a renewal resumes it (the Mondays missed are not sent); support triggers a digest
 * by hand beside the weekly ones. The dispatcher runs on a
 * manual clock that walks four weeks across the start of US daylight saving time in a few seconds.
 *
 *   bash scripts/services.sh up        # PostgreSQL on 127.0.0.1:5432
 *   pnpm --filter @duetime/example-tenant-digests start
 */
import { userInfo } from 'node:os';
import { pathToFileURL } from 'node:url';
import { createPostgresBackend } from '@duetime/backend-postgres';
import { Dispatcher, ManualClock } from '@duetime/core';
import pg from 'pg';
import {
  addTenant,
  createTables,
  type DigestMessages,
  digestHandlers,
  digestKey,
  moveTenant,
  reinstateTenant,
  removeTenant,
  sendDigestNow,
  suspendTenant,
} from './tenants.js';

export interface DemoOptions {
  /** PostgreSQL (default `DUETIME_PG_URL`, else postgres://127.0.0.1:5432/test). */
  url?: string;
  /** Where the timeline goes (default: the console). */
  print?: (line: string) => void;
}

export interface Sent {
  tenantId: string;
  dueAt: string;
  localTime: string;
  /** `scheduled`, or `triggered` for a digest support sent by hand. */
  kind: string;
}

/**
 * The URL with the operating-system user in it when neither it nor the environment names one, as psql
 * does (pg alone would send no user name, which the server refuses).
 */
function withUser(url: string): string {
  const parsed = new URL(url);
  if (parsed.username || process.env.PGUSER || process.env.USER) return url;
  parsed.username = encodeURIComponent(userInfo().username);
  return parsed.toString();
}

const DAY = 86_400_000;
/** Monday 2027-03-01, 00:00 UTC: four Mondays follow, and US daylight saving time starts on 2027-03-14. */
const WEEK_ONE = Date.parse('2027-03-01T00:00:00Z');

/** Runs the demo in a schema of its own (dropped at the end); resolves with the digests sent. */
export async function main(options: DemoOptions = {}): Promise<Sent[]> {
  const url = options.url ?? process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';
  const print = options.print ?? ((line: string) => console.log(line));
  const schema = `digests_${process.pid}_${Date.now().toString(36)}`;
  const pool = new pg.Pool({ connectionString: withUser(url), max: 4 });
  // The store runs on the demo's clock too: pausing and resuming judge what fell due by it.
  const clock = new ManualClock(WEEK_ONE);
  const backend = await createPostgresBackend({ pool }, { schema, clock });
  const sent: Sent[] = [];
  try {
    await backend.store.transact((tx) => createTables(tx.sql, schema));
    const start = new Date(WEEK_ONE);
    await addTenant(
      backend.store,
      schema,
      { id: 'acme', name: 'Acme (New York)', zone: 'America/New_York' },
      start,
    );
    await addTenant(
      backend.store,
      schema,
      { id: 'hallo', name: 'Hallo (Berlin)', zone: 'Europe/Berlin' },
      start,
    );
    await addTenant(
      backend.store,
      schema,
      { id: 'kaisha', name: 'Kaisha (Tokyo)', zone: 'Asia/Tokyo' },
      start,
    );
    print('three tenants signed up; each row and its Monday 09:00 digest committed together');
    for (const id of ['acme', 'hallo', 'kaisha']) {
      const s = await backend.store.loadSchedule(digestKey(id));
      print(`  ${digestKey(id)}: first digest due ${s?.at.toISOString()}`);
    }

    const dispatcher = new Dispatcher<DigestMessages, pg.PoolClient>({
      store: backend.store,
      clock,
      handlers: digestHandlers(schema, (tenantId, dueAt, localTime, kind) => {
        sent.push({ tenantId, dueAt: dueAt.toISOString(), localTime, kind });
        print(
          `${new Date(clock.now()).toISOString().slice(0, 16)}Z  digest for ${tenantId.padEnd(6)} ${localTime}${kind === 'scheduled' ? '' : ` (${kind})`}`,
        );
      }),
    });
    const stop = new AbortController();
    const running = dispatcher.run(stop.signal);
    /** Walks the manual clock to `until`, one due occurrence at a time. */
    const walk = async (until: number) => {
      for (;;) {
        // By due time: a paused digest is due at no time and never stops the walk.
        const next = (await backend.store.pageSchedules({ order: 'due', limit: 1 })).items[0];
        if (!next || next.dueAt.getTime() > until) break;
        clock.set(next.dueAt.getTime());
        dispatcher.wake();
        while ((await backend.store.loadSchedule(next.key))?.version === next.version)
          await new Promise((resolve) => setTimeout(resolve, 5));
      }
      clock.set(until);
    };
    await walk(WEEK_ONE + 10 * DAY);
    await moveTenant(backend.store, schema, 'kaisha', 'America/Los_Angeles', new Date(clock.now()));
    print('kaisha moved to Los Angeles: its row and its digest recurrence changed in one transaction');
    const cancelled = await removeTenant(backend.store, schema, 'hallo');
    print(`hallo left: its row and ${cancelled} schedule(s) under tenant/hallo/ went in one transaction`);
    await suspendTenant(backend.store, 'acme');
    print('acme’s subscription lapsed: its digest is paused, not cancelled');
    await walk(WEEK_ONE + 17 * DAY);
    const resumed = await reinstateTenant(backend.store, 'acme');
    print(`acme renewed: digest resumed, ${resumed.missed?.count ?? 0} missed Monday(s) not sent`);
    await sendDigestNow(backend.store, 'kaisha');
    print('support sent kaisha a digest by hand, beside its weekly ones');
    await walk(WEEK_ONE + 28 * DAY);
    stop.abort();
    await running;
    const left = (await backend.store.listSchedules()).map((s) => `${s.key} next ${s.at.toISOString()}`);
    print(`still scheduled: ${left.join('; ')}`);
    return sent;
  } finally {
    await backend.close();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await pool.end();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
