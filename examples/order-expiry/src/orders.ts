import { aggregate, type Processor, type Store } from '@duetime/core';

export type OrderStatus = 'none' | 'pending' | 'paid' | 'expired';

export interface OrderState {
  status: OrderStatus;
  amount: number;
}

/** An order's state, folded from its events. */
export const order = aggregate<OrderState>({
  type: 'order',
  initial: { status: 'none', amount: 0 },
  apply: {
    'order.placed': (state, event) => ({
      ...state,
      status: 'pending',
      amount: (event.data as { amount: number }).amount,
    }),
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
): Promise<void> {
  await store.transact(async (tx) => {
    await tx.exec(order, orderId, (state, ag) => {
      if (state.status !== 'none') throw new Error(`order ${orderId} exists already`);
      ag.raise('order.placed', { amount });
    });
    await tx.schedule(expiryKey(orderId), expiresAt, { type: 'order.expire', aggregateId: orderId });
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
 * The dispatcher's processor: expires an order only while it is still pending. Its event commits together
 * with the consumption of the schedule, so an order is expired exactly once, even across crashes.
 */
export function expiryProcessor(
  onChecked: (orderId: string, outcome: 'expired' | OrderStatus) => void,
): Processor {
  return async (tx, message) => {
    if (message.type !== 'order.expire') return;
    let expired = false;
    const state = await tx.exec(order, message.aggregateId, (s, ag) => {
      if (s.status !== 'pending') return;
      ag.raise('order.expired');
      expired = true;
    });
    onChecked(message.aggregateId, expired ? 'expired' : state.status);
  };
}
