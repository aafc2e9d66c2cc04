import { Dispatcher } from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

/** Longer than any wait below: a delivery within the deadlines can only come from the push channel. */
const LONG = 600_000;
/** How long the suite gives a prompt wake-up on a loaded machine (the promise is "at once"). */
const PROMPT = 20_000;

/**
 * The push channel: while it is live, a dispatcher sleeps until its next known deadline (up to
 * `watchedRescanInterval`), and another process's commit wakes it. A store without one
 * (`pushChannel: false`) is checked for the weaker promise: the rescan still finds such a commit.
 */
export function pushChannelTests({ harness, capabilities }: SuiteContext): void {
  if (!capabilities.pushChannel) {
    it('without a push channel (pushChannel: false), the rescan finds another instance’s commit', async () => {
      const first = await harness().open();
      const second = await harness().open(first.namespace);
      harness().run(
        new Dispatcher({
          store: first.store,
          rescanInterval: 300,
          watchedRescanInterval: LONG,
          processor: async (tx, message) => {
            await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
          },
        }),
      );
      await second.store.transact((tx) =>
        tx.schedule('rescan/1', new Date(Date.now() + 50), effectMessage('rescan')),
      );
      await waitFor(
        'the rescan to deliver it',
        async () => (await appliedCount(first.store, 'rescan')) === 1,
      );
      expect(first.store.watching, 'a store whose channel is live declares pushChannel (the default)').toBe(
        false,
      );
    });
    return;
  }

  it('wakes a dispatcher sleeping on a long watchedRescanInterval when another instance commits', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store: first.store,
      rescanInterval: LONG,
      watchedRescanInterval: LONG,
      processor: async (tx, message, { schedule }) => {
        delivered.push(schedule.key);
        await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
      },
    });
    harness().run(dispatcher);
    await waitFor(
      'the push channel to go live (a store without one declares pushChannel: false)',
      () => first.store.watching,
    );
    // Due at once: only a wake-up from the channel (not a deadline this dispatcher knew of) delivers it.
    await second.store.transact((tx) =>
      tx.schedule('push/1', new Date(Date.now() - 1), effectMessage('push-1')),
    );
    // Delivered means committed: the processor's effect, not only its start (the batch commits after it).
    await waitFor(
      'the other instance’s commit to be delivered',
      async () => (await appliedCount(first.store, 'push-1')) === 1,
      { timeoutMs: PROMPT },
    );
    // And again, for a schedule due a little later: the dispatcher learns its deadline from the channel.
    await second.store.transact((tx) =>
      tx.schedule('push/2', new Date(Date.now() + 200), effectMessage('push-2')),
    );
    await waitFor(
      'a later commit of the other instance to be delivered',
      async () => (await appliedCount(first.store, 'push-2')) === 1,
      {
        timeoutMs: PROMPT,
      },
    );
    expect(await appliedCount(first.store, 'push-1')).toBe(1);
    expect(await appliedCount(first.store, 'push-2')).toBe(1);
    expect(delivered).toEqual(['push/1', 'push/2']);
    expect(first.store.watching).toBe(true);
  });
}
