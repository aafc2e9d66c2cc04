import { aggregate, type Handlers, type MessageOf, type Store } from '@duetime/core';

export type OrderStatus = 'none' | 'pending' | 'paid' | 'expired';

export interface OrderState {
  status: OrderStatus;
  amount: number;
  /** Who takes the payment; `legacy-bank` stands for a provider whose API is down. */
  provider: string;
}

/** The messages this service schedules, and the data each carries. */
export type OrderMessages = {
  'order.expire': { orderId: string };
};

/** An order's state, folded from its events. */
export const order = aggregate<OrderState>({
  type: 'order',
  initial: { status: 'none', amount: 0, provider: 'card' },
  apply: {
    'order.placed': (state, event) => {
      const data = event.data as { amount: number; provider?: string };
      return { ...state, status: 'pending', amount: data.amount, provider: data.provider ?? 'card' };
    },
    'order.paid': (state) => ({ ...state, status: 'paid' }),
    'order.expired': (state) => ({ ...state, status: 'expired' }),
  },
});

export const expiryKey = (orderId: string) => `order/${orderId}/expire`;

/** Places an order and schedules its expiry check, in one transaction: both happen, or neither. */
export async function placeOrder(
  store: Store,
  orderId: string,
  amount: number,
  expiresAt: Date,
  provider = 'card',
): Promise<void> {
  await store.transact(async (tx) => {
    await tx.exec(order, orderId, (state, ag) => {
      if (state.status !== 'none') throw new Error(`order ${orderId} exists already`);
      ag.raise('order.placed', { amount, provider });
    });
    const check: MessageOf<OrderMessages> = { type: 'order.expire', data: { orderId } };
    await tx.schedule(expiryKey(orderId), expiresAt, check);
  });
}

/** The checkout pays an order and cancels its expiry check in the same transaction. */
export async function payAtCheckout(store: Store, orderId: string): Promise<OrderStatus> {
  return store.transact(async (tx) => {
    const state = await tx.exec(order, orderId, (s, ag) => {
      if (s.status === 'pending') ag.raise('order.paid');
    });
    await tx.cancelSchedule(expiryKey(orderId));
    return state.status;
  });
}

/**
 * A bank transfer records the payment only; the expiry check stays scheduled and, when it fires, finds the
 * order paid and leaves it alone.
 */
export async function payByBankTransfer(store: Store, orderId: string): Promise<OrderStatus> {
  return store.transact(async (tx) => {
    const state = await tx.exec(order, orderId, (s, ag) => {
      if (s.status === 'pending') ag.raise('order.paid');
    });
    return state.status;
  });
}

/**
 * The dispatcher's handlers, one per message type: the expiry check expires an order only while it is
 * still pending. Its event commits together with the consumption of the schedule, so an order is expired
 * exactly once, even across crashes. An order whose payment provider cannot be reached (to void the
 * authorisation) fails its check; after the dispatcher's `maxAttempts` it becomes a dead letter.
 */
export function expiryHandlers(
  onChecked: (orderId: string, outcome: 'expired' | OrderStatus) => void,
): Handlers<OrderMessages> {
  return {
    'order.expire': async (tx, message) => {
      const { orderId } = message.data!;
      let expired = false;
      const state = await tx.exec(order, orderId, (s, ag) => {
        if (s.status !== 'pending') return;
        if (s.provider === 'legacy-bank')
          throw new Error(`${s.provider} did not answer (void authorisation)`);
        ag.raise('order.expired');
        expired = true;
      });
      onChecked(orderId, expired ? 'expired' : state.status);
    },
  };
}
