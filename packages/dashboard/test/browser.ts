import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@duetime/conformance';
import {
  type Backend,
  Dispatcher,
  parseCron,
  recurring,
  silentLogger,
  UnrecoverableError,
} from '@duetime/core';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningDashboard, startDashboard } from '../src/index.js';

/** Debian's Chromium (`apt-get install -y chromium`), or DUETIME_CHROMIUM. */
export const CHROMIUM = process.env.DUETIME_CHROMIUM ?? '/usr/bin/chromium';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Opens Chromium with a fresh profile; fails naming the command that installs it when it is missing. */
export async function openBrowser(): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `Chromium is not installed at ${CHROMIUM}: run \`bash scripts/services.sh up\` (as root it runs \`apt-get install -y chromium\`), or set DUETIME_CHROMIUM to a Chromium binary`,
    );
  const profile = await mkdtemp(join(tmpdir(), 'duetime-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 900 },
  });
  return {
    context,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

const HOUR = 3_600_000;
const XSS = '<script>window.__duetimeXss = 1</script><img src=x onerror="window.__duetimeXss = 2">';

/** What the seeded store holds: 60 one-shot schedules (30 past their deadline), one recurring, one dead letter, a leader. */
export async function seed(backend: Backend): Promise<{ leaderToken: number }> {
  const now = Date.now();
  await backend.store.transact(async (tx) => {
    for (let i = 0; i < 60; i++) {
      const key = `order/${String(i).padStart(2, '0')}/expire`;
      await tx.schedule(key, new Date(now + (i - 30) * 60_000 + (i < 30 ? -HOUR : HOUR)), {
        type: 'order.expire',
        aggregateId: `ORD-${i}`,
        data: { order: i, note: i === 7 ? XSS : 'ok' },
      });
    }
    await tx.schedule('report/daily', recurring(parseCron('0 9 * * *', 'Europe/Berlin')), {
      type: 'report.daily',
    });
    await tx.schedule('mail/broken', new Date(now - 1000), { type: 'mail.send', data: { to: 'x' } });
  });
  // mail/broken fails for good (a dead letter with its error); every order past its deadline fails once
  // and waits ten hours for its retry (pending, with its attempt and last error).
  const dispatcher = new Dispatcher({
    store: backend.store,
    logger: silentLogger,
    telemetry: false,
    maxAttempts: 5,
    processor: async (_tx, message) => {
      if (message.type === 'mail.send') throw new UnrecoverableError('mailbox <b>full</b>');
      throw new Error('not now');
    },
    retryDelay: 10 * HOUR,
    batchSize: 1,
  });
  const ac = new AbortController();
  const done = dispatcher.run(ac.signal);
  await waitFor(
    'the dead letter',
    async () => (await backend.store.loadDeadLetter('mail/broken')) !== undefined,
  );
  await waitFor(
    'every due order tried once',
    async () => (await backend.store.countSchedules({ order: 'due', through: new Date(), limit: 1 })) === 0,
  );
  ac.abort();
  await done;
  const grant = await backend.leases.acquire(
    'duetime/calendar/production/default/leader',
    'replica-a',
    10 * 60_000,
  );
  if (!grant) throw new Error('could not take the leader lease for the test');
  return { leaderToken: grant.token };
}

const HERE = dirname(fileURLToPath(import.meta.url));

/**
 * The browser suite for one backend: `open()` gives a fresh, empty backend (and `drop()` removes it).
 */
export function browserSuite(name: string, open: () => Promise<Backend>): void {
  describe(`dashboard in Chromium on ${name}`, () => {
    let backend: Backend;
    let browser: Awaited<ReturnType<typeof openBrowser>>;
    let leaderToken: number;
    const dashboards: RunningDashboard[] = [];

    beforeAll(async () => {
      browser = await openBrowser();
      backend = await open();
      ({ leaderToken } = await seed(backend));
    }, 120_000);

    afterAll(async () => {
      for (const d of dashboards) await d.close();
      await browser?.close();
      await backend?.close();
    });

    const serve = async (allowActions: boolean) => {
      const dashboard = await startDashboard({ backend, port: 0, allowActions, label: `${name} store` });
      dashboards.push(dashboard);
      return dashboard;
    };

    const load = async (url: string): Promise<Page> => {
      const page = await browser.context.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(String(error)));
      await page.goto(url);
      await page.waitForSelector('body[data-loaded]');
      expect(errors).toEqual([]);
      return page;
    };

    const rows = (page: Page, table: string) =>
      page
        .locator(`tbody#${table} tr[data-key]`)
        .evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.key));

    it('shows what the store holds: totals, schedules, dead letters, recurring schedules, the leader', async () => {
      const dashboard = await serve(false);
      const page = await load(dashboard.url);
      expect(await page.textContent('[data-testid=pending]')).toBe('61');
      expect(await page.textContent('[data-testid=dead]')).toBe('1');
      expect(await page.textContent('[data-testid=mode]')).toBe('read-only');
      expect(await page.textContent('[data-testid=label]')).toBe(`${name} store`);
      const first = await rows(page, 'schedules');
      expect(first).toHaveLength(25);
      expect(first[0]).toBe('order/00/expire');
      const retried = page.locator('tbody#schedules tr[data-key="order/00/expire"]');
      expect(await retried.textContent()).toContain('Error: not now');
      const dead = page.locator('tbody#dead-letters tr[data-key="mail/broken"]');
      expect(await dead.textContent()).toContain('UnrecoverableError: mailbox <b>full</b>');
      const report = page.locator('tbody#recurring tr');
      expect(await report.textContent()).toContain('cron 0 9 * * * Europe/Berlin');
      expect(await report.locator('td').nth(4).textContent()).toMatch(/(\d{4}-\d\d-\d\d \d\d:00:00Z.*){3}/);
      const group = page.locator('[data-testid=groups] .group[data-group=default] .leader');
      expect(await group.textContent()).toContain(`leader replica-a, epoch ${leaderToken}`);
      expect(await page.locator('[data-testid=chart] svg polyline').count()).toBeGreaterThanOrEqual(1);
      // No action buttons on a read-only page.
      expect(await page.locator('button[data-action]').count()).toBe(0);
      await page.close();
    });

    it('shows a payload holding markup as text: no script runs, no element is made from it', async () => {
      const dashboard = await serve(false);
      const page = await load(dashboard.url);
      const cellText = await page.locator('tbody#schedules tr[data-key="order/07/expire"] pre').textContent();
      expect(cellText).toContain(XSS.replaceAll('"', '\\"'));
      expect(await page.evaluate(() => (window as { __duetimeXss?: number }).__duetimeXss)).toBeUndefined();
      expect(await page.locator('tbody#schedules img').count()).toBe(0);
      expect(await page.locator('tbody#dead-letters b').count()).toBe(0);
      await page.close();
    });

    it('pages through schedules and searches by key prefix', async () => {
      const dashboard = await serve(false);
      const page = await load(dashboard.url);
      await page.click('[data-testid=next]');
      await page.waitForFunction(
        () => document.querySelector('[data-testid=page]')?.textContent === 'page 2',
      );
      const second = await rows(page, 'schedules');
      expect(second[0]).toBe('order/25/expire');
      expect(second).toHaveLength(25);
      await page.click('[data-testid=next]');
      await page.waitForFunction(
        () => document.querySelector('[data-testid=page]')?.textContent === 'page 3',
      );
      const third = await rows(page, 'schedules');
      // 61 schedules: 25 + 25 + 11 (the recurring one falls among them by deadline).
      expect(third).toHaveLength(11);
      expect(await page.isDisabled('[data-testid=next]')).toBe(true);
      await page.click('[data-testid=prev]');
      await page.waitForFunction(
        () => document.querySelector('[data-testid=page]')?.textContent === 'page 2',
      );
      expect((await rows(page, 'schedules'))[0]).toBe('order/25/expire');
      await page.fill('[data-testid=prefix]', 'order/5');
      await page.press('[data-testid=prefix]', 'Enter');
      await page.waitForFunction(
        () => document.querySelector('[data-testid=page]')?.textContent === 'page 1',
      );
      await page.waitForFunction(
        () => document.querySelectorAll('tbody#schedules tr[data-key]').length === 10,
      );
      expect(await rows(page, 'schedules')).toEqual(
        Array.from({ length: 10 }, (_, i) => `order/5${i}/expire`),
      );
      await page.close();
    });

    it('changes the store only when actions are enabled, and only after confirmation', async () => {
      const readOnly = await serve(false);
      const page = await load(readOnly.url);
      // Even a well-formed POST with the page's CSRF token is refused.
      const refused = await page.evaluate(async () => {
        const overview = await (await fetch('api/overview')).json();
        const res = await fetch('api/actions/cancel', {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-duetime-csrf': overview.csrf },
          body: JSON.stringify({ key: 'order/40/expire' }),
        });
        return { status: res.status, body: await res.json() };
      });
      expect(refused.status).toBe(403);
      expect(refused.body.error).toContain('--allow-actions');
      expect(await backend.store.loadSchedule('order/40/expire')).toBeDefined();
      await page.close();

      const writable = await serve(true);
      const admin = await load(writable.url);
      expect(await admin.textContent('[data-testid=mode]')).toBe('actions enabled');
      // Without the CSRF token, the same POST is refused.
      const noCsrf = await admin.evaluate(async () => {
        const res = await fetch('api/actions/cancel', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ key: 'order/40/expire' }),
        });
        return res.status;
      });
      expect(noCsrf).toBe(403);
      const cancel = admin.locator(
        'tbody#schedules tr[data-key="order/03/expire"] button[data-action=cancel]',
      );
      await cancel.click();
      await admin.waitForSelector('[data-testid=confirm][open]');
      expect(await admin.textContent('#confirm-text')).toContain('order/03/expire');
      await admin.click('[data-testid=confirm-cancel]');
      expect(await backend.store.loadSchedule('order/03/expire')).toBeDefined();
      await cancel.click();
      await admin.click('[data-testid=confirm-ok]');
      await waitFor(
        'order/03 cancelled',
        async () => (await backend.store.loadSchedule('order/03/expire')) === undefined,
      );
      await admin.waitForFunction(
        () => !document.querySelector('tbody#schedules tr[data-key="order/03/expire"]'),
      );

      // Pause, then resume, one schedule: the row says since when it is paused, and offers Resume.
      const row = 'tbody#schedules tr[data-key="order/05/expire"]';
      await admin.click(`${row} button[data-action=pause]`);
      expect(await admin.textContent('#confirm-text')).toContain('Pause the schedule order/05/expire');
      await admin.click('[data-testid=confirm-ok]');
      await waitFor(
        'order/05 paused',
        async () => (await backend.store.loadSchedule('order/05/expire'))?.paused !== undefined,
      );
      await admin.waitForSelector(`${row} button[data-action=resume]`);
      expect(await admin.textContent(row)).toContain('paused since');
      await admin.click(`${row} button[data-action=resume]`);
      await admin.click('[data-testid=confirm-ok]');
      await waitFor(
        'order/05 resumed',
        async () => (await backend.store.loadSchedule('order/05/expire'))?.paused === undefined,
      );
      await admin.waitForSelector(`${row} button[data-action=pause]`);

      await admin.click(
        'tbody#dead-letters tr[data-key="mail/broken"] button[data-action=retry-dead-letter]',
      );
      await admin.click('[data-testid=confirm-ok]');
      await waitFor(
        'the dead letter scheduled again',
        async () => (await backend.store.loadDeadLetter('mail/broken')) === undefined,
      );
      expect((await backend.store.loadSchedule('mail/broken'))?.message.type).toBe('mail.send');
      await admin.waitForFunction(() => document.querySelector('[data-testid=dead]')?.textContent === '0');
      await admin.close();
    });

    it('draws the due backlog over time, and renders the page for a screenshot', async () => {
      // Five schedules fall due and nobody delivers them: the oldest waits longer at every sample.
      await backend.store.transact(async (tx) => {
        for (let i = 0; i < 5; i++)
          await tx.schedule(`late/${i}`, new Date(Date.now() - 2000 + i), { type: 'invoice.remind' });
      });
      const dashboard = await startDashboard({
        backend,
        port: 0,
        label: `${name} store`,
        sampleIntervalMs: 250,
      });
      dashboards.push(dashboard);
      const page = await load(dashboard.url);
      await waitFor('six samples', async () => {
        const { samples } = (await (await fetch(`${dashboard.url}api/lateness`)).json()) as {
          samples: { due: number; oldestDueMs: number }[];
        };
        return samples.length >= 6 ? samples : undefined;
      }).then((samples) => {
        expect(samples.every((s) => s.due >= 5)).toBe(true);
        expect(samples.at(-1)!.oldestDueMs).toBeGreaterThan(samples[0]!.oldestDueMs);
      });
      await page.click('#refresh');
      await page
        .waitForFunction(
          () => (document.querySelector('#lateness-note')?.textContent ?? '').includes('6'),
          undefined,
          { timeout: 10_000 },
        )
        .catch(() => undefined);
      expect(Number(await page.textContent('[data-testid=due]'))).toBeGreaterThanOrEqual(5);
      const points = await page.getAttribute('[data-testid=chart] svg polyline', 'points');
      expect(points?.split(' ').length).toBeGreaterThanOrEqual(6);
      const png = await page.screenshot({ fullPage: false });
      expect(png.subarray(1, 4).toString('latin1')).toBe('PNG');
      expect(png.length).toBeGreaterThan(20_000);
      // `DUETIME_SCREENSHOT=docs/dashboard.png` refreshes the picture in the README.
      const target = process.env.DUETIME_SCREENSHOT;
      if (target) await writeFile(resolve(HERE, '..', target), png);
      await page.close();
    });
  });
}
