import type { Logger } from '@duetime/core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JetStreamScheduler, type JetStreamSchedulerOptions } from '../../src/jetstream-scheduler/index.js';
import { Collector } from './collector.js';
import {
  connectRequired,
  Harness,
  NEW_URL,
  newServer,
  OLD_URL,
  reportNotRun,
  uniquePrefix,
  waitFor,
} from './helpers.js';
import { StallProxy } from './stall-proxy.js';

/** A logger that keeps what it is told, for assertions. */
function recordingLogger(): Logger & { entries: Array<{ level: string; message: string; fields: unknown }> } {
  const entries: Array<{ level: string; message: string; fields: unknown }> = [];
  const at =
    (level: string) =>
    (message: string, fields?: Record<string, unknown>): void => {
      entries.push({ level, message, fields });
    };
  return { entries, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** Every fired message, grouped by firedId: the stream sequences that carried it. */
function sequencesById(c: Collector): Map<string, Set<number>> {
  const map = new Map<string, Set<number>>();
  for (const call of c.calls) {
    const set = map.get(call.firedId) ?? new Set<number>();
    set.add(call.info.streamSequence);
    map.set(call.firedId, set);
  }
  return map;
}

const CASES = [
  { name: 'NATS 2.9', url: OLD_URL, needsNew: false },
  { name: 'NATS >= 2.12, emulated forced', url: NEW_URL, needsNew: true },
];

for (const server of CASES) {
  const absent = server.needsNew && !newServer.available;
  if (absent) reportNotRun(`JetStream scheduler, the pump's lease on ${server.name}`, newServer.reason);

  describe(`JetStream scheduler, the pump's lease (${server.name})`, () => {
    // Needed, not optional: fail with why, and how to provide it.

    beforeAll(() => {
      if (absent)
        throw new Error(`${newServer.reason}; start it with 'bash scripts/services.sh up --clusters'`);
    });
    let nc: NatsConnection;
    let harness: Harness;
    const closers: Array<() => Promise<unknown>> = [];
    let collector: Collector | undefined;

    beforeAll(async () => {
      nc = await connectRequired(server.url);
      harness = new Harness(nc);
    });
    afterEach(async () => {
      await collector?.stop();
      collector = undefined;
      for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
      await harness.cleanup();
    });
    afterAll(async () => {
      await nc?.close();
    });

    /** A pump on a connection of its own, through a proxy that can stall it. */
    async function stallablePump(
      prefix: string,
    ): Promise<{ scheduler: JetStreamScheduler; proxy: StallProxy }> {
      const proxy = await StallProxy.start(server.url);
      closers.push(() => proxy.close());
      const own = await connect({ servers: proxy.url, maxReconnectAttempts: -1, timeout: 3_000 });
      closers.push(() => own.close());
      const options: JetStreamSchedulerOptions = {
        prefix,
        mode: 'emulated',
        leaseTtl: 1_000,
        duplicateWindow: 30_000,
      };
      const scheduler = new JetStreamScheduler(own, options);
      closers.push(() => {
        proxy.flow(); // a stalled pump could not release its lease
        return scheduler.close();
      });
      await scheduler.ensureStream();
      return { scheduler, proxy };
    }

    it('two pumps never run at once when the leader loses its lease (its connection stalls), and nothing fires twice', async () => {
      const writer = harness.scheduler({ mode: 'emulated', pump: false });
      const { prefix } = await writer.ensureStream();
      collector = await Collector.start(writer, 'lease-loss', 5, () => undefined, { concurrency: 16 });
      const pumps = [await stallablePump(prefix), await stallablePump(prefix)];

      // Sampled on one event loop, both answers describe the same instant.
      let overlaps = 0;
      let samples = 0;
      const sampler = setInterval(() => {
        samples++;
        if (pumps.every((p) => p.scheduler.isPumpLeader)) overlaps++;
      }, 1);
      closers.push(async () => clearInterval(sampler));

      const start = Date.now();
      const count = 400;
      const timers = await Promise.all(
        Array.from({ length: count }, (_, i) => writer.at(`loss/${i}`, new Date(start + 300 + i * 20), i)),
      );
      const expected = timers.map((t) => `once:${t.timer}`);

      // Three times: stall the leader's connection until the other pump has taken over, then let it flow.
      let takeovers = 0;
      for (let round = 0; round < 3; round++) {
        type Pump = (typeof pumps)[number];
        const leader = (await waitFor(
          'a leader',
          () => pumps.find((p) => p.scheduler.isPumpLeader),
          20_000,
        )) as Pump;
        const other = pumps.find((p) => p !== leader) as Pump;
        leader.proxy.stall();
        await waitFor('the other pump to take over', () => other.scheduler.isPumpLeader, 20_000);
        expect(leader.scheduler.isPumpLeader).toBe(false);
        takeovers++;
        leader.proxy.flow(); // its late replies arrive now: none may make it the pump again
        await waitFor(
          'some timers to fire',
          () => (collector?.calls.length ?? 0) >= (round + 1) * 50,
          20_000,
        );
      }

      await waitFor(
        'every timer to fire',
        () => expected.every((id) => sequencesById(collector as Collector).has(id)),
        30_000,
      );
      clearInterval(sampler);
      expect(takeovers).toBe(3);
      expect(samples).toBeGreaterThan(100);
      expect(overlaps, 'samples in which both pumps held a valid lease').toBe(0);
      const byId = sequencesById(collector);
      for (const [id, seqs] of byId) expect(seqs.size, `${id} fired ${seqs.size} times`).toBe(1);
      expect(byId.size).toBe(count);
    });

    it('a closed pump releases its lease: another process takes over without waiting for it to expire', async () => {
      // A lease of 15 s: a takeover by expiry could not come before 10 s after close() (the holder renews
      // every 5 s); a candidate asks every 5 s, so a released lease is taken within about 5 s.
      const ttl = 15_000;
      const first = harness.scheduler({ mode: 'emulated', leaseTtl: ttl });
      const { prefix } = await first.ensureStream();
      await waitFor('the first pump to lead', () => first.isPumpLeader);
      const second = harness.scheduler({ prefix, mode: 'emulated', leaseTtl: ttl });
      await second.ensureStream();
      expect(second.isPumpLeader).toBe(false);
      const jsm = await jetstreamManager(nc);
      const lease = await jsm.streams.getMessage(first.stream, { last_by_subj: `${prefix}.sched.lease` });
      expect(lease).not.toBeNull();

      await first.close();
      const released = Date.now();
      expect(first.isPumpLeader).toBe(false);
      expect(
        await jsm.streams.getMessage(first.stream, { last_by_subj: `${prefix}.sched.lease` }),
      ).toBeNull();
      await waitFor('the second pump to take over', () => second.isPumpLeader, 9_000);
      expect(Date.now() - released).toBeLessThan(ttl);
      // A new holding: its fencing token (the sequence of the write that acquired it; 0 in that write
      // itself) is above the first holding's.
      const tokenOf = (m: typeof lease) => m?.json<{ token: number }>().token || m?.seq;
      const taken = await jsm.streams.getMessage(first.stream, { last_by_subj: `${prefix}.sched.lease` });
      expect(tokenOf(taken)).toBeGreaterThan(tokenOf(lease) as number);

      collector = await Collector.start(second, 'after-release');
      await second.after('released/1', 10, 'x');
      await waitFor('the new pump to fire', () => collector && collector.calls.length > 0);
    });

    it('completes a stream made by an earlier version (no direct get, lease on .sched.pump) and elects on it', async () => {
      const prefix = uniquePrefix('old');
      const stream = `${prefix}_sched`;
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({
        name: stream,
        subjects: [
          `${prefix}.sched.once.*.*`,
          `${prefix}.sched.cron.*`,
          `${prefix}.sched.fire.*`,
          `${prefix}.sched.pump`,
        ],
        allow_rollup_hdrs: true,
        duplicate_window: 30_000 * 1_000_000,
      });
      // The earlier lease format: owner in a header, no body. It means nothing to this version.
      const h = headers();
      h.set('Duetime-Owner', 'an-old-process');
      await jetstream(nc).publish(`${prefix}.sched.pump`, undefined, { headers: h });

      const scheduler = harness.scheduler({ prefix, mode: 'emulated' });
      expect(scheduler.stream).toBe(stream);
      await scheduler.ensureStream();
      const config = (await jsm.streams.info(stream)).config;
      expect(config.allow_direct).toBe(true);
      expect(config.subjects).toEqual(
        expect.arrayContaining([`${prefix}.sched.pump`, `${prefix}.sched.lease`, `${prefix}.sched.clock`]),
      );
      await waitFor('the pump to lead', () => scheduler.isPumpLeader);
      collector = await Collector.start(scheduler, 'old-stream');
      await scheduler.after('old/1', 10, 'x');
      await waitFor('the fire', () => collector && collector.calls.length > 0);
    });

    it('a message on the lease subject that is not a lease keeps every pump out and is reported as corrupt data', async () => {
      const writer = harness.scheduler({ mode: 'emulated', pump: false });
      const { prefix } = await writer.ensureStream();
      await jetstream(nc).publish(`${prefix}.sched.lease`, 'not a lease');
      const logger = recordingLogger();
      const pump = harness.scheduler({ prefix, mode: 'emulated', logger });
      await pump.ensureStream();
      const warning = await waitFor('a warning', () =>
        logger.entries.find((e) => e.level === 'warn' && e.message.includes('pump lease')),
      );
      expect((warning?.fields as { error?: unknown } | undefined)?.error).toMatchObject({
        code: 'DUETIME_CORRUPT_DATA',
        message: expect.stringContaining(`${prefix}.sched.lease`),
      });
      expect(pump.isPumpLeader).toBe(false);
    });
  });
}
