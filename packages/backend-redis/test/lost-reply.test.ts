import { aggregate, Dispatcher, type Logger } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { luaScripts } from '../src/lua/scripts.generated.js';
import { message, redisFixture, redisUrl, waitFor } from './helpers.js';
import { ReplyDroppingProxy } from './proxy.js';

const fx = redisFixture();
const proxies: ReplyDroppingProxy[] = [];
afterEach(async () => {
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

async function proxiedUrl(): Promise<{ url: string; proxy: ReplyDroppingProxy }> {
  const proxy = await ReplyDroppingProxy.start(new URL(redisUrl));
  proxies.push(proxy);
  const url = new URL(redisUrl);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  return { url: url.href, proxy };
}

function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const push = (level: string) => (m: string) => lines.push(`${level}: ${m}`);
  return { lines, debug: push('debug'), info: push('info'), warn: push('warn'), error: push('error') };
}

const effects = aggregate({
  type: 'lost-reply',
  initial: 0,
  apply: { 'effect.applied': (n: number) => n + 1 },
});

describe('a commit whose reply is lost', () => {
  for (const resend of [true, false]) {
    it(`is applied once when ${resend ? 'ioredis resends it after reconnecting' : 'the commit retries it itself'}`, async () => {
      const { url, proxy } = await proxiedUrl();
      const prefix = fx.prefix();
      const logger = recordingLogger();
      const { createRedisBackend } = await import('../src/index.js');
      const backend = fx.closeLater(
        await createRedisBackend(
          { url },
          { prefix, logger, requestTimeoutMs: 1000, redisOptions: { autoResendUnfulfilledCommands: resend } },
        ),
      );
      proxy.dropReplyTo(luaScripts.commit.sha);
      await backend.store.transact(async (tx) => {
        await tx.schedule('lost/1', new Date(Date.now() + 60_000), message('l'));
        await tx.exec(effects, 'lost-agg', (_s, ag) => ag.raise('effect.applied'));
      });
      expect(proxy.dropped).toBe(1);
      expect((await backend.store.loadSchedule('lost/1'))?.version).toBe(1);
      expect(await backend.store.loadEvents('lost-agg')).toHaveLength(1);
      expect(logger.lines).toContain('debug: redis commit was already applied; a resend was recognised');
      if (!resend) expect(logger.lines).toContain('warn: redis commit failed; retrying');
    });
  }

  it('delivers a due message once when the reply to its consuming commit is lost', async () => {
    const { url, proxy } = await proxiedUrl();
    const prefix = fx.prefix();
    const { createRedisBackend } = await import('../src/index.js');
    const backend = fx.closeLater(await createRedisBackend({ url }, { prefix }));
    await backend.store.transact((tx) => tx.schedule('lost/due', new Date(Date.now() - 1), message('d')));
    let calls = 0;
    const dispatcher = new Dispatcher({
      store: backend.store,
      rescanInterval: 50,
      retryDelay: 10,
      processor: async (tx, _m, { schedule }) => {
        calls++;
        if (calls === 1) proxy.dropReplyTo(luaScripts.commit.sha);
        await tx.exec(effects, 'due-agg', (_s, ag) => ag.raise('effect.applied', { v: schedule.version }));
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    try {
      await waitFor(
        'the schedule to be consumed',
        async () => (await backend.store.loadSchedule('lost/due')) === undefined,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(proxy.dropped).toBe(1);
      expect(await backend.store.loadEvents('due-agg')).toHaveLength(1);
    } finally {
      controller.abort();
      await done;
    }
  });
});
