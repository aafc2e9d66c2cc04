import { InvalidArgumentError } from '@duetime/core';
import { MAX_ATOMIC_BATCH } from '../io.js';

/**
 * A transaction (or one settlement of a delivery) that would need more messages than one atomic batch
 * takes. The store commits each as one atomic batch (all of it or nothing, in one round trip), and NATS
 * caps a batch at 1,000 messages by default (`jetstream { limits { batch { max_msgs } } }`; the backend's
 * `atomicBatchLimit` says what the server allows, and a server refusal teaches it the real ceiling). Refused
 * before anything is written: nothing of it is stored. Split the work into smaller transactions.
 *
 * What a commit writes: two messages per schedule it writes or cancels (its record and its timer), one
 * per event and per dead letter, and one commit marker (see commit.ts). So 499 schedules fit one
 * transaction at the server's default.
 *
 * It is an {@link InvalidArgumentError} (code `DUETIME_INVALID_ARGUMENT`, field `transaction`).
 */
export class TransactionTooLargeError extends InvalidArgumentError {
  /** Schedules the transaction writes or cancels (records and their tombstones). */
  readonly schedules: number;
  /** Messages its atomic batch would hold, timers and the commit marker included. */
  readonly messages: number;
  /** The most messages one atomic batch holds. */
  readonly limit: number;

  constructor(schedules: number, messages: number, limit = MAX_ATOMIC_BATCH) {
    super(
      'transaction',
      `${schedules} schedules in ${messages} messages`,
      `a NATS store commits a transaction as one atomic batch, at most ${limit} messages (two per schedule written or cancelled: its record and its timer; one per event and dead letter; one commit marker); nothing was written: split it into smaller transactions (or raise the server's jetstream.limits.batch.max_msgs and the backend's atomicBatchLimit together)`,
    );
    this.schedules = schedules;
    this.messages = messages;
    this.limit = limit;
  }
}
