import { randomUUID } from 'node:crypto';
import { BackendError, isTransient } from '@duetime/core';
import type { NatsIo } from './io.js';
import type { Layout } from './layout.js';
import type { Entry } from './state/types.js';

/**
 * A commit stored later than this after it was first sent is void (the planner aborts it). It bounds how
 * long a publish the client buffered during an outage, and gave up on, can still take effect.
 */
export const COMMIT_VOID_AFTER_MS = 5 * 60_000;
/** Room left in a message for headers and the entry's envelope. */
const ENVELOPE_BYTES = 16 * 1024;

export interface CommitLogOptions {
  /** How long to keep retrying a commit publish through transient failures (same message id). */
  commitTimeoutMs: number;
}

/** Appends transactions to the commit log: the single commit point of every transaction. */
export class CommitLog {
  readonly #io: NatsIo;
  readonly #layout: Layout;
  readonly #options: CommitLogOptions;

  constructor(io: NatsIo, layout: Layout, options: CommitLogOptions) {
    this.#io = io;
    this.#layout = layout;
    this.#options = options;
  }

  /** A new transaction id (also its `Nats-Msg-Id`). */
  newId(): string {
    return randomUUID().replaceAll('-', '');
  }

  /**
   * Appends `entry` and returns its log sequence. A transient failure is retried with the same message
   * id, so a retry of a publish that did land is dropped by the server's duplicate window and returns
   * the original sequence: the transaction is logged once. Entries larger than the server's maximum
   * message size are written as parts first; the commit message referencing them comes last.
   */
  async append(entry: Entry): Promise<number> {
    const body = Buffer.from(JSON.stringify(entry), 'utf8');
    const max = Math.max(64 * 1024, (this.#io.nc.info?.max_payload ?? 1024 * 1024) - ENVELOPE_BYTES);
    if (body.length <= max) return this.#publish(this.#layout.logCommit, body, entry.tx);
    const payload = Buffer.from(
      JSON.stringify({ ops: entry.ops, ...(entry.reads ? { reads: entry.reads } : {}) }),
      'utf8',
    );
    const parts = Math.ceil(payload.length / max);
    for (let i = 0; i < parts; i++)
      await this.#publish(
        `${this.#layout.logPart}.${entry.tx}.${i}`,
        payload.subarray(i * max, (i + 1) * max),
        `${entry.tx}.${i}`,
      );
    const commit: Entry = { v: 1, tx: entry.tx, exp: entry.exp, ops: [], parts };
    return this.#publish(this.#layout.logCommit, Buffer.from(JSON.stringify(commit)), entry.tx);
  }

  async #publish(subject: string, data: Uint8Array, msgId: string): Promise<number> {
    const deadline = performance.now() + this.#options.commitTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await this.#io.publish(subject, data, { msgId });
        if (result === 'conflict')
          throw new BackendError('append to the commit log', 'unexpected expectation failure');
        return result.seq;
      } catch (error) {
        if (!isTransient(error) || this.#io.closed) throw error;
        if (performance.now() >= deadline)
          throw new BackendError(
            'append to the commit log',
            `no acknowledgement within ${this.#options.commitTimeoutMs} ms; the outcome is unknown (a delayed copy can still commit within ${COMMIT_VOID_AFTER_MS / 1000} s of the first attempt)`,
            { cause: error, transient: true },
          );
        await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 50 * 2 ** Math.min(attempt, 5))));
      }
    }
  }
}
