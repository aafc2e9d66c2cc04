import { aggregate, type Message } from '@duetime/core';

/**
 * The aggregate the suite uses to observe effects: every committed delivery raises one `effect.applied`,
 * so a message whose effect committed twice shows two events.
 */
export const effects = aggregate({
  type: 'conformance-effects',
  initial: 0,
  apply: {
    'effect.applied': (count: number) => count + 1,
    'effect.noted': (count: number) => count,
  },
});

/** A message for the effects aggregate `id`. */
export function effectMessage(id: string, data?: unknown): Message {
  return data === undefined
    ? { type: 'effect.requested', aggregateId: id }
    : { type: 'effect.requested', aggregateId: id, data };
}

/** How many `effect.applied` events the aggregate `id` has. */
export async function appliedCount(
  store: { loadEvents(id: string): Promise<{ type: string }[]> },
  id: string,
): Promise<number> {
  return (await store.loadEvents(id)).filter((e) => e.type === 'effect.applied').length;
}
