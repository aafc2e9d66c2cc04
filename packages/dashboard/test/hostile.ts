import { waitFor } from '@duetime/conformance';
import { type Backend, Dispatcher, silentLogger, UnrecoverableError } from '@duetime/core';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningDashboard, startDashboard } from '../src/index.js';
import { openBrowser } from './browser.js';

const HOUR = 3_600_000;
/** A key whose right-to-left override would show it as `bidi/exe.pdf`. */
export const BIDI_KEY = 'bidi/\u202Efdp.exe';
/** What the page shows for it: the override as the six characters `\u202E`. */
const BIDI_SHOWN = 'bidi/\\u202Efdp.exe';
const DEAD_KEY = 'dead/\u202Etxt.scr';
const DEAD_SHOWN = 'dead/\\u202Etxt.scr';
/** A message type of 512 characters (the longest identifier) without a break opportunity. */
const LONG_TYPE = `type.${'x'.repeat(507)}`;
/** A processor error of 2,000 characters (the most a schedule keeps), without a space. */
const LONG_ERROR = `Error: ${'e'.repeat(1993)}`;
const LONG_KEY = `long/${'k'.repeat(507)}`;
/** 200,000 characters of data (near the 256 KiB a message may take): pages carry only its start. */
const HUGE_DATA = { blob: 'h'.repeat(200_000) };
const TOKEN = 'a-long-enough-dashboard-token';

/** Stores schedules and dead letters a hostile producer could write. */
export async function seedHostile(backend: Backend): Promise<void> {
  const past = new Date(Date.now() - 1000);
  await backend.store.transact(async (tx) => {
    await tx.schedule(BIDI_KEY, past, {
      type: 'bidi.type\u202Egnp',
      data: { note: 'a\u202Eb\u2066c\u200Bd' },
    });
    await tx.schedule('long/type', past, { type: LONG_TYPE, data: { blob: 'd'.repeat(3000) } });
    await tx.schedule(LONG_KEY, past, { type: 'long.key' });
    await tx.schedule(DEAD_KEY, past, { type: 'dead.type' });
    await tx.schedule('huge/pending', past, { type: 'huge', data: HUGE_DATA });
    await tx.schedule('huge/dead', past, { type: 'dead.type', data: HUGE_DATA });
  });
  const dispatcher = new Dispatcher({
    store: backend.store,
    logger: silentLogger,
    telemetry: false,
    maxAttempts: 5,
    retryDelay: 10 * HOUR,
    batchSize: 1,
    processor: async (_tx, message) => {
      if (message.type === 'dead.type') throw new UnrecoverableError('refused by \u202Eevil');
      if (message.type === LONG_TYPE) throw new Error('e'.repeat(1993));
      throw new Error('failed \u202Eright to left');
    },
  });
  const ac = new AbortController();
  const done = dispatcher.run(ac.signal);
  await waitFor('the dead letters', async () => (await backend.store.countDeadLetters()) === 2);
  await waitFor(
    'every hostile schedule tried once',
    async () => (await backend.store.countSchedules({ order: 'due', through: new Date(), limit: 1 })) === 0,
  );
  ac.abort();
  await done;
}

/** Whether the page is wider than its viewport (anything scrolls the page sideways). */
function overflow(page: Page) {
  return page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    bodyWidth: document.body.scrollWidth,
  }));
}

/**
 * Where `before` and `after` are drawn inside the element `selector` matches: the x of each one's first
 * character, found through the text nodes as laid out (not as stored).
 */
function drawnOrder(page: Page, selector: string, before: string, after: string) {
  return page.locator(selector).evaluate(
    (root, [a, b]) => {
      const x = (needle: string): number | undefined => {
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const at = node.textContent?.indexOf(needle) ?? -1;
          if (at < 0) continue;
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + 1);
          return range.getBoundingClientRect().left;
        }
        return undefined;
      };
      return { before: x(a as string), after: x(b as string) };
    },
    [before, after],
  );
}

/** The page under hostile data: long values, bidirectional keys, a bad `#token=`. */
export function hostileSuite(name: string, open: () => Promise<Backend>): void {
  describe(`dashboard in Chromium on ${name}, with hostile data`, () => {
    let backend: Backend;
    let browser: Awaited<ReturnType<typeof openBrowser>>;
    const dashboards: RunningDashboard[] = [];

    beforeAll(async () => {
      browser = await openBrowser();
      backend = await open();
      await seedHostile(backend);
    }, 120_000);

    afterAll(async () => {
      for (const d of dashboards) await d.close();
      await browser?.close();
      await backend?.close();
    });

    const serve = async (options: { allowActions?: boolean; token?: string } = {}) => {
      const dashboard = await startDashboard({ backend, port: 0, label: `${name} store`, ...options });
      dashboards.push(dashboard);
      return dashboard;
    };

    const load = async (url: string): Promise<{ page: Page; errors: string[] }> => {
      const page = await browser.context.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(String(error)));
      await page.goto(url);
      return { page, errors };
    };

    it('stays within a 1,280 px viewport with a 512-character type and a 2,000-character error, each shown in full on demand', async () => {
      const dashboard = await serve();
      const { page, errors } = await load(dashboard.url);
      await page.waitForSelector('body[data-loaded]');
      expect(errors).toEqual([]);
      expect(page.viewportSize()?.width).toBe(1280);
      const row = page.locator('tbody#schedules tr[data-key="long/type"]');
      const lastError = await backend.store.loadSchedule('long/type');
      expect(lastError?.lastError).toBe(LONG_ERROR);

      const before = await overflow(page);
      expect(before.scrollWidth).toBeLessThanOrEqual(before.clientWidth);
      expect(before.bodyWidth).toBeLessThanOrEqual(before.clientWidth);
      // Every cell of the row is on screen: none pushed off to the right by its neighbours.
      const rights = await row
        .locator('td')
        .evaluateAll((tds) => tds.map((td) => td.getBoundingClientRect().right));
      expect(Math.max(...rights)).toBeLessThanOrEqual(1280);

      // Shown cut, with a control that opens the whole value.
      const type = row.locator('td.type details');
      expect((await type.locator('summary').textContent())?.length).toBeLessThan(200);
      await type.locator('summary').click();
      expect(await type.evaluate((d) => (d as HTMLDetailsElement).open)).toBe(true);
      expect(await type.locator(':scope > div').textContent()).toBe(LONG_TYPE);
      const error = row.locator('td.error details');
      await error.locator('summary').click();
      expect(await error.locator(':scope > div').textContent()).toBe(LONG_ERROR);
      const data = row.locator('td.data details');
      await data.locator('summary').click();
      expect(await data.locator(':scope > pre').textContent()).toBe(
        JSON.stringify({ blob: 'd'.repeat(3000) }),
      );
      // Opened, they wrap inside their columns: the page is still no wider.
      const opened = await overflow(page);
      expect(opened.scrollWidth).toBeLessThanOrEqual(opened.clientWidth);

      const longKey = page.locator(`tbody#schedules tr[data-key="${LONG_KEY}"] td.key details`);
      await longKey.locator('summary').click();
      expect(await longKey.locator(':scope > div').textContent()).toBe(LONG_KEY);
      expect((await overflow(page)).scrollWidth).toBeLessThanOrEqual(1280);

      // A narrow window: the tables scroll inside their boxes; the page itself never does.
      await page.setViewportSize({ width: 600, height: 900 });
      const narrow = await overflow(page);
      expect(narrow.scrollWidth).toBeLessThanOrEqual(narrow.clientWidth);
      await page.close();
    });

    it('shows 200 KB payloads cut by the store, and loads a whole one (with the token) only when asked', async () => {
      const dashboard = await serve({ token: TOKEN });
      const asked: string[] = [];
      const { page, errors } = await load(`${dashboard.url}#token=${encodeURIComponent(TOKEN)}`);
      page.on('request', (request) =>
        asked.push(new URL(request.url()).pathname + new URL(request.url()).search),
      );
      await page.waitForSelector('body[data-loaded]');
      expect(errors).toEqual([]);
      const whole = JSON.stringify(HUGE_DATA);
      for (const [table, key, read] of [
        ['schedules', 'huge/pending', 'schedule'],
        ['dead-letters', 'huge/dead', 'dead-letter'],
      ] as const) {
        const data = page.locator(`tbody#${table} tr[data-key="${key}"] td.data details`);
        expect(await data.getAttribute('data-full')).toBe('pending');
        // The page holds the start the store cut (4,000 characters), not the payload.
        expect(await data.locator(':scope > pre').textContent()).toBe(`${whole.slice(0, 4000)}…`);
        expect(await data.locator('summary').textContent()).toContain('load the full value');
        await data.locator('summary').click();
        await page.waitForFunction(
          (selector) => document.querySelector(selector)?.getAttribute('data-full') === 'loaded',
          `tbody#${table} tr[data-key="${key}"] td.data details`,
        );
        expect(await data.locator(':scope > pre').textContent()).toBe(whole);
        expect(asked).toContain(`/api/${read}?key=${encodeURIComponent(key)}`);
        // Closed and opened again: shown from what was loaded, not asked for twice.
        await data.locator('summary').click();
        await expect
          .poll(() => data.locator('summary').textContent(), { timeout: 20_000 })
          .toContain(`show all ${whole.length} characters`);
        await data.locator('summary').click();
        expect(asked.filter((a) => a.startsWith(`/api/${read}?`))).toHaveLength(1);
      }
      expect((await overflow(page)).scrollWidth).toBeLessThanOrEqual(1280);
      await page.close();
    });

    it('isolates bidirectional keys and shows their control characters in tables: bidi/\\u202Efdp.exe never reads as bidi/exe.pdf', async () => {
      const dashboard = await serve();
      const { page, errors } = await load(dashboard.url);
      await page.waitForSelector('body[data-loaded]');
      expect(errors).toEqual([]);
      const key = `tbody#schedules tr[data-key="${BIDI_KEY}"] td.key`;
      expect(await page.textContent(key)).toBe(BIDI_SHOWN);
      expect(await page.locator(`${key} bdi`).count()).toBe(1);
      expect(await page.getAttribute(`${key} .esc`, 'title')).toBe('U+202E');
      const drawn = await drawnOrder(page, key, 'fdp', '.exe');
      expect(drawn.before).toBeLessThan(drawn.after as number);
      // The type, the data and the error are shown the same way; the row's other cells are untouched.
      const row = `tbody#schedules tr[data-key="${BIDI_KEY}"]`;
      expect(await page.textContent(`${row} td.type`)).toBe('bidi.type\\u202Egnp');
      expect(await page.textContent(`${row} td.error`)).toBe('Error: failed \\u202Eright to left');
      expect(await page.textContent(`${row} td.data`)).toBe('{"note":"a\\u202Eb\\u2066c\\u200Bd"}');
      const error = await drawnOrder(page, `${row} td.error`, 'right', 'left');
      expect(error.before).toBeLessThan(error.after as number);

      const dead = `tbody#dead-letters tr[data-key="${DEAD_KEY}"]`;
      expect(await page.textContent(`${dead} td.key`)).toBe(DEAD_SHOWN);
      expect(await page.textContent(`${dead} td.error`)).toBe('UnrecoverableError: refused by \\u202Eevil');
      // No text of the page holds a raw override or isolate: they are all shown as escapes.
      const raw = await page.evaluate(() =>
        /[\u202A-\u202E\u2066-\u2069]/.test(document.body.textContent ?? ''),
      );
      expect(raw).toBe(false);
      await page.close();
    });

    it('shows the key of every confirm dialog isolated and escaped, and the question reads in order', async () => {
      const dashboard = await serve({ allowActions: true });
      const { page, errors } = await load(dashboard.url);
      await page.waitForSelector('body[data-loaded]');
      expect(errors).toEqual([]);
      const cancel = page.locator(`tbody#schedules tr[data-key="${BIDI_KEY}"] button[data-action=cancel]`);
      expect(await cancel.getAttribute('aria-label')).toBe(`Cancel ${BIDI_SHOWN}`);
      expect(await cancel.getAttribute('title')).toBe(`Cancel ${BIDI_SHOWN}`);
      await cancel.click();
      await page.waitForSelector('[data-testid=confirm][open]');
      expect(await page.textContent('#confirm-text')).toBe(
        `Cancel the schedule ${BIDI_SHOWN}? It will not be delivered.`,
      );
      expect(await page.locator('#confirm-text code bdi').count()).toBe(1);
      const key = await drawnOrder(page, '#confirm-text', 'fdp', '.exe');
      expect(key.before).toBeLessThan(key.after as number);
      const question = await drawnOrder(page, '#confirm-text', 'will', 'delivered');
      expect(question.before).toBeLessThan(question.after as number);
      await page.click('[data-testid=confirm-cancel]');
      expect(await backend.store.loadSchedule(BIDI_KEY)).toBeDefined();

      const retry = page.locator(
        `tbody#dead-letters tr[data-key="${DEAD_KEY}"] button[data-action=retry-dead-letter]`,
      );
      expect(await retry.getAttribute('aria-label')).toBe(`Retry ${DEAD_SHOWN}`);
      await retry.click();
      await page.waitForSelector('[data-testid=confirm][open]');
      expect(await page.textContent('#confirm-text')).toBe(
        `Schedule the dead letter ${DEAD_SHOWN} again, now?`,
      );
      const again = await drawnOrder(page, '#confirm-text', 'again', 'now');
      expect(again.before).toBeLessThan(again.after as number);
      await page.click('[data-testid=confirm-cancel]');
      expect(await backend.store.loadDeadLetter(DEAD_KEY)).toBeDefined();
      await page.close();
    });

    it('asks for the token when #token= is malformed, instead of failing to start', async () => {
      const dashboard = await serve({ token: TOKEN });
      const { page, errors } = await load(`${dashboard.url}#token=%E0%A4%A`);
      await page.waitForSelector('[data-testid=login]:not([hidden])', { timeout: 10_000 });
      expect(errors).toEqual([]);
      expect(await page.isVisible('[data-testid=login-note]')).toBe(true);
      expect(await page.textContent('[data-testid=login-note]')).toContain('could not be read');
      expect(new URL(page.url()).hash).toBe('');
      await page.fill('#token', TOKEN);
      await page.press('#token', 'Enter');
      await page.waitForSelector('body[data-loaded]');
      expect(await page.isHidden('[data-testid=login]')).toBe(true);
      expect(Number(await page.textContent('[data-testid=pending]'))).toBeGreaterThanOrEqual(3);
      expect(errors).toEqual([]);
      await page.close();

      // A well-formed one opens the page at once, and leaves the address bar.
      const good = await load(`${dashboard.url}#token=${encodeURIComponent(TOKEN)}`);
      await good.page.waitForSelector('body[data-loaded]');
      expect(new URL(good.page.url()).hash).toBe('');
      expect(await good.page.isHidden('[data-testid=login]')).toBe(true);
      await good.page.close();

      // Without a token required, a malformed one is dropped and the page loads.
      const open = await serve();
      const plain = await load(`${open.url}#token=%E0%A4%A`);
      await plain.page.waitForSelector('body[data-loaded]');
      expect(plain.errors).toEqual([]);
      await plain.page.close();
    });
  });
}
