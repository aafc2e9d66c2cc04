import { aggregate, DuetimeError, type Store } from '@duetime/core';

/** The stream holding the pause test's fence and its run log. */
export const FENCE_STREAM = 'fence/beat';

/** One durable run of the pause test. */
export interface FencedRun {
  occurrence: string;
  at: number;
  epoch: number;
  runner: string;
}

interface FenceState {
  /** The highest leadership epoch that has claimed the store. */
  epoch: number;
  ran: Set<string>;
}

/**
 * A fencing token check in the store: each leader claims its epoch (its lease's fencing token) before it
 * runs anything, and a write from a lower epoch is refused. The optimistic check on the stream makes the
 * claim and the check atomic with the write.
 */
export const fence = aggregate<FenceState>({
  type: 'reliability-fence',
  initial: () => ({ epoch: Number.NEGATIVE_INFINITY, ran: new Set<string>() }),
  apply: {
    claimed: (state, event) => ({
      ...state,
      epoch: Math.max(state.epoch, (event.data as { epoch: number }).epoch),
    }),
    ran: (state, event) => {
      const run = event.data as FencedRun;
      const ran = new Set(state.ran);
      ran.add(run.occurrence);
      return { epoch: Math.max(state.epoch, run.epoch), ran };
    },
  },
});

/** A write from an epoch older than the one that has claimed the store. */
export class FencedError extends DuetimeError {
  constructor(epoch: number, current: number) {
    super('DUETIME_LEADERSHIP_LOST', `epoch ${epoch} is fenced off by epoch ${current}`);
  }
}

/** Claims `epoch` (no-op when already claimed); throws {@link FencedError} when a newer epoch has. */
export async function claimEpoch(store: Store, epoch: number): Promise<void> {
  await store.transact(
    (tx) =>
      tx.exec(fence, FENCE_STREAM, (state, ag) => {
        if (epoch < state.epoch) throw new FencedError(epoch, state.epoch);
        if (epoch > state.epoch) ag.raise('claimed', { epoch });
      }),
    { maxRetries: 100 },
  );
}

/**
 * Records a run unless a newer epoch has claimed the store (`FencedError`) or the occurrence is already
 * recorded (`ALREADY`: handlers are idempotent on the occurrence id).
 */
export async function recordFenced(store: Store, run: FencedRun): Promise<'RECORDED' | 'ALREADY'> {
  let outcome: 'RECORDED' | 'ALREADY' = 'RECORDED';
  await store.transact(
    (tx) =>
      tx.exec(fence, FENCE_STREAM, (state, ag) => {
        if (run.epoch < state.epoch) throw new FencedError(run.epoch, state.epoch);
        if (state.ran.has(run.occurrence)) {
          outcome = 'ALREADY';
          return;
        }
        outcome = 'RECORDED';
        ag.raise('ran', run);
      }),
    { maxRetries: 100 },
  );
  return outcome;
}

/** The fence's log in commit order: claims (`epoch`) and runs (`occurrence`, `epoch`, …). */
export async function loadFenceLog(
  store: Store,
): Promise<({ type: 'claimed'; epoch: number } | ({ type: 'ran' } & FencedRun))[]> {
  return (await store.loadEvents(FENCE_STREAM)).map((e) =>
    e.type === 'ran'
      ? { type: 'ran' as const, ...(e.data as FencedRun) }
      : { type: 'claimed' as const, epoch: (e.data as { epoch: number }).epoch },
  );
}
