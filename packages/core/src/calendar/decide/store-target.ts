import { InvalidArgumentError } from '../../errors.js';
import { aggregate } from '../../store/aggregate.js';
import type { Store } from '../../store/store.js';
import type { Message } from '../../store/types.js';
import { schedulePrefix } from '../../validate.js';
import type { Handler, Invocation } from '../run/invocation.js';

/**
 * One marker stream per occurrence: its single event says "this occurrence's durable message was
 * enqueued". It is what makes a re-run (after a crash between the commit and the cursor write) a no-op.
 */
export const calendarOccurrences = aggregate({
  type: 'duetime.calendar-occurrence',
  initial: () => ({ enqueued: false, key: undefined as string | undefined }),
  apply: {
    'calendar.occurrence.enqueued': (_state, event) => ({
      enqueued: true,
      key: (event.data as { key?: string } | undefined)?.key,
    }),
  },
});

/** What a store target's `build` returns: a message, or a message with its own deadline. */
export type StoreTargetMessage = Message | { message: Message; at?: Date };

export interface StoreTargetOptions {
  /** Prefix of the schedule keys and marker aggregate ids (default `calendar/`). */
  prefix?: string;
}

/** The schedule key a store target uses for an occurrence. */
export function storeTargetKey(invocation: Invocation, prefix = 'calendar/'): string {
  return `${prefix}${invocation.schedule}/${invocation.occurrence}`;
}

/**
 * A handler that turns each occurrence into at most one durable message (capability 1): in one
 * transaction it marks the occurrence as enqueued and schedules `build(invocation)` under the key
 * `<prefix><schedule>/<occurrence>`, due at the occurrence's instant unless `build` says otherwise. An
 * occurrence that runs again (after a crash, a failover, a manual re-run of the same id) finds the mark
 * and enqueues nothing, so a dispatcher delivers each tick once, with capability 1's retries.
 *
 * @example
 * calendar('Europe/Berlin').dailyAt('nightly-report', '02:00',
 *   storeTarget(backend.store, (inv) => ({ type: 'report.build', aggregateId: 'reports', data: { for: inv.intendedAt.toISOString() } })))
 * @throws {InvalidArgumentError} for a store without `transact`, a non-function `build` or a bad prefix.
 */
export function storeTarget<Sql>(
  store: Store<Sql>,
  build: (invocation: Invocation) => StoreTargetMessage | Promise<StoreTargetMessage>,
  options: StoreTargetOptions = {},
): Handler {
  if (typeof store?.transact !== 'function')
    throw new InvalidArgumentError('store', store, 'must be a duetime Store (backend.store)');
  if (typeof build !== 'function')
    throw new InvalidArgumentError('build', build, 'must be a function (invocation) => message');
  const prefix = schedulePrefix(options.prefix ?? 'calendar/', 'options.prefix');
  return async ({ invocation }) => {
    const built = await build(invocation);
    const hasEnvelope = typeof built === 'object' && built !== null && 'message' in built;
    const message = hasEnvelope ? built.message : (built as Message);
    const at = (hasEnvelope ? built.at : undefined) ?? invocation.intendedAt;
    const key = storeTargetKey(invocation, prefix);
    await store.transact(async (tx) => {
      let fresh = false;
      await tx.exec(calendarOccurrences, `${prefix}${invocation.occurrence}`, (state, ag) => {
        if (state.enqueued) return;
        fresh = true;
        ag.raise('calendar.occurrence.enqueued', { key, schedule: invocation.schedule });
      });
      if (fresh) await tx.schedule(key, at, message);
    });
  };
}
