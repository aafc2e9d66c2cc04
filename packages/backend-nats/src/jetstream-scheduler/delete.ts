import type { JetStreamManager, MsgRequest, StoredMsg } from '@nats-io/jetstream';
import { apiCode, isNotFound, JS_MESSAGE_DELETE_FAILED } from '../errors.js';

/**
 * Why definitions the emulated pump follows are removed one message at a time, never by a subject purge
 * or a `Nats-Rollup` header: NATS 2.9.10 (and other servers before the fix of nats-server#3838) moves every
 * consumer whose filter covers a purged subject past *all* the messages it has not delivered yet, on any
 * subject. The pump's follower pulls in batches and lags behind a burst, so one `cancelTimers` during a
 * burst of `after()` calls made it skip, and never fire, the timers of other keys. Deleting a message by
 * its sequence leaves consumers where they are, on every server version.
 */

/** The first message on `subject` (wildcards allowed) at or after sequence `from`, or null. */
export async function nextOnSubject(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
  from: number,
): Promise<StoredMsg | null> {
  // The server has answered `next_by_subj` since 2.9; the client's type for this call omits it.
  const query = { seq: Math.max(1, from), next_by_subj: subject } as unknown as MsgRequest;
  return jsm.streams.getMessage(stream, query);
}

/** Deletes the message at `seq`; false when it was already gone (another process deleted it first). */
export async function deleteSequence(jsm: JetStreamManager, stream: string, seq: number): Promise<boolean> {
  try {
    return await jsm.streams.deleteMessage(stream, seq, false);
  } catch (error) {
    if (isNotFound(error) || isAlreadyGone(error)) return false;
    throw error;
  }
}

/**
 * The server refuses to delete a message that is not there with error 10057 ("message delete failed"),
 * saying "no message found" (deleted already) or "stream store EOF" (a sequence never written), on 2.9
 * and 2.15 alike; the same code also covers real failures, told apart by that text.
 */
function isAlreadyGone(error: unknown): boolean {
  return (
    apiCode(error) === JS_MESSAGE_DELETE_FAILED &&
    error instanceof Error &&
    /no message found|store EOF/i.test(error.message)
  );
}

/**
 * Deletes every message on `subject` (wildcards allowed) with a sequence below `below` (all of them when
 * omitted), one by one in sequence order. Returns how many it deleted (not those another process deleted
 * first). Messages published while it runs may or may not be deleted, as with a purge.
 */
export async function deleteOnSubject(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
  below = Number.POSITIVE_INFINITY,
): Promise<number> {
  let deleted = 0;
  let from = 1;
  for (;;) {
    const msg = await nextOnSubject(jsm, stream, subject, from);
    if (!msg || msg.seq >= below) return deleted;
    if (await deleteSequence(jsm, stream, msg.seq)) deleted++;
    from = msg.seq + 1;
  }
}
