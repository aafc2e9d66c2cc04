import type { Store } from './store.js';
import type { StoreChange } from './types.js';

/**
 * How core's own components (the Dispatcher) tell a store's listeners about a commit they made on the
 * driver directly, as `store.transact` does for the application's commits. Not part of the public API.
 */
const announcers = new WeakMap<object, (change: StoreChange) => void>();

export function registerAnnouncer(store: object, announce: (change: StoreChange) => void): void {
  announcers.set(store, announce);
}

/** Tells `store`'s change listeners about a local commit (a no-op for stores not made by createStore). */
export function announceLocalChange(store: Store<unknown>, change: Omit<StoreChange, 'remote'>): void {
  announcers.get(store)?.({ ...change, remote: false });
}
