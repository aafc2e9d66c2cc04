import { randomBytes } from 'node:crypto';
import {
  type CompletionResult,
  type Consumer,
  type ConsumerMessages,
  type DirectBatchOptions,
  type DirectLastFor,
  DiscardPolicy,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  type PurgeOpts,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import {
  createInbox,
  type MsgHdrs,
  type NatsConnection,
  headers as natsHeaders,
} from '@nats-io/transport-node';
import {
  isStreamNotFound,
  isWrongLastSequence,
  JS_DUPLICATE_MESSAGE_ID,
  JS_WRONG_LAST_SEQUENCE,
  JS_WRONG_LAST_SEQUENCE_PROPOSED,
  toDuetimeError,
} from './errors.js';
import { nextOnSubject } from './jetstream-scheduler/delete.js';
import { addOrRead, StreamMismatchError, type StreamSettings } from './streams.js';

/** A message read back from a stream. */
export interface StoredMessage {
  subject: string;
  seq: number;
  /** Server timestamp, milliseconds since the epoch. */
  time: number;
  data: Uint8Array;
  header(name: string): string | undefined;
  json<T>(): T;
}

export interface PublishOptions {
  /** `Nats-Expected-Last-Sequence` (the whole stream); 0 means "the stream is empty". */
  expectLastSeq?: number;
  /** `Nats-Expected-Last-Subject-Sequence`; 0 means "no message on this subject". */
  expectSubjectSeq?: number;
  /** `Nats-Msg-Id`: a second publish with the same id inside the stream's window is dropped. */
  msgId?: string;
  headers?: Record<string, string>;
}

/** A message pulled from a durable consumer: acknowledged through `reply` (see {@link NatsIo.pullNow}). */
export interface PulledMessage {
  subject: string;
  /** Its stream sequence. */
  seq: number;
  /** How many times the consumer delivered it (1 the first time). */
  deliveryCount: number;
  /** How many messages the consumer held undelivered when it delivered this one. */
  pending: number;
  headers: MsgHdrs | undefined;
  data: Uint8Array;
  /** The acknowledgement subject. */
  reply: string;
}

/** Published, or refused because an expectation header did not hold. */
export type PublishResult = { seq: number; duplicate: boolean } | 'conflict';

/** One message of an atomic batch. */
export interface BatchMessage {
  subject: string;
  data: Uint8Array | string;
  headers?: Record<string, string>;
}

/**
 * What an atomic batch publish came to: stored (the stream sequence of its last message; the batch's
 * messages have the `count` sequences before it, in order), refused because an expectation header of one
 * of its messages did not hold (nothing stored), or refused as a duplicate of a batch stored before under
 * the same message id (the retry of a batch whose acknowledgement was lost).
 */
export type BatchResult =
  | { kind: 'stored'; lastSeq: number; count: number }
  | { kind: 'conflict'; description: string }
  | { kind: 'duplicate' };

/** How many messages a sweep's ordered consumer asks the server for at a time. */
const SWEEP_BUFFER = 10_000;
/** How long a sweep waits for its next message before finishing with batch direct gets. */
const SWEEP_IDLE_MS = 1000;
/**
 * How long the server keeps a sweep's consumer once nothing asks it for messages: the consumer of a
 * process that died during a read goes after this (the client's default is five minutes). A sweep that
 * ends deletes its consumer at once: NATS 2.15 and later allow a stream 1,000 consumers unless it sets
 * another limit, and consumers left behind by frequent listings would reach it.
 */
const SWEEP_INACTIVE_MS = 30_000;

/** The largest batch a NATS server takes by default (its `max_batch_size` limit). */
export const MAX_ATOMIC_BATCH = 1000;
/** The most subjects one batch direct get (`multi_last`) answers. */
export const MAX_MULTI_LAST = 100;

const decoder = new TextDecoder();

/** `Nats-Rollup: sub`: the message replaces every earlier one of its subject (stream `allow_rollup_hdrs`). */
export const ROLLUP = { 'Nats-Rollup': 'sub' } as const;

/**
 * The few JetStream calls the backend makes, each mapping client errors to duetime errors that name the
 * operation and the server. Keeps the rest of the package free of client details.
 */
export class NatsIo {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly server: string;
  readonly #timeoutMs: number;
  /** How long a commit keeps resending a batch whose reply was lost. */
  readonly commitTimeoutMs: number;
  #closed = false;
  /**
   * The replicas of each stream this I/O opened or checked ({@link ensureStream}); a stream not among them
   * is read as replicated.
   */
  readonly #replicas = new Map<string, number>();

  private constructor(nc: NatsConnection, jsm: JetStreamManager, timeoutMs: number, commitTimeoutMs: number) {
    this.nc = nc;
    this.jsm = jsm;
    this.#timeoutMs = timeoutMs;
    this.commitTimeoutMs = commitTimeoutMs;
    this.js = jetstream(nc, { timeout: timeoutMs });
    this.server = nc.getServer();
  }

  static async open(nc: NatsConnection, timeoutMs: number, commitTimeoutMs = 30_000): Promise<NatsIo> {
    try {
      const jsm = await jetstreamManager(nc, { timeout: timeoutMs });
      return new NatsIo(nc, jsm, timeoutMs, commitTimeoutMs);
    } catch (error) {
      throw toDuetimeError(error, 'open JetStream', nc.getServer());
    }
  }

  /** Marks the I/O closed: later failures report {@link ClosedError}. */
  close(): void {
    this.#closed = true;
  }

  get closed(): boolean {
    return this.#closed || this.nc.isClosed();
  }

  error(error: unknown, operation: string): Error {
    return toDuetimeError(error, operation, this.server, this.closed);
  }

  async publish(
    subject: string,
    data: Uint8Array | string,
    options: PublishOptions = {},
  ): Promise<PublishResult> {
    const h = natsHeaders();
    for (const [k, v] of Object.entries(options.headers ?? {})) h.set(k, v);
    if (options.expectLastSeq !== undefined)
      h.set('Nats-Expected-Last-Sequence', String(options.expectLastSeq));
    if (options.expectSubjectSeq !== undefined)
      h.set('Nats-Expected-Last-Subject-Sequence', String(options.expectSubjectSeq));
    if (options.msgId !== undefined) h.set('Nats-Msg-Id', options.msgId);
    try {
      const ack = await this.js.publish(subject, data, { headers: h });
      return { seq: ack.seq, duplicate: ack.duplicate };
    } catch (error) {
      if (isWrongLastSequence(error)) return 'conflict';
      throw this.error(error, `publish to ${subject}`);
    }
  }

  /**
   * Pulls up to `max` messages a durable pull consumer has for delivery now, without waiting for more
   * (`no_wait`): one request, answered by the messages there are and a status. With `waitMs`, waits up to
   * that long for the first (a long poll, ended by the server's status when it expires). Each is pending on the
   * consumer (a claim) until acknowledged through {@link ack}, or until its `ack_wait` passes.
   */
  async pullNow(stream: string, consumer: string, max: number, waitMs = 0): Promise<PulledMessage[]> {
    const inbox = createInbox();
    const sub = this.nc.subscribe(inbox);
    const got: PulledMessage[] = [];
    let answered = false;
    const timer = setTimeout(() => sub.unsubscribe(), waitMs + this.#timeoutMs);
    try {
      this.nc.publish(
        `$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`,
        JSON.stringify(
          waitMs > 0 ? { batch: max, expires: waitMs * 1_000_000 } : { batch: max, no_wait: true },
        ),
        { reply: inbox },
      );
      for await (const m of sub) {
        if (!m.reply) {
          // A status (404 no messages, 408 request done, 409 consumer gone or limits): the pull ended.
          answered = true;
          const code = m.headers?.code ?? 0;
          if (code === 409 && /consumer (deleted|not found)/i.test(m.headers?.description ?? ''))
            throw new Error(`consumer ${consumer} of stream ${stream}: ${m.headers?.description}`);
          break;
        }
        answered = true;
        got.push({
          subject: m.subject,
          seq: ackSubjectNumber(m.reply, 'seq'),
          deliveryCount: ackSubjectNumber(m.reply, 'delivered'),
          pending: ackSubjectNumber(m.reply, 'pending'),
          headers: m.headers,
          data: m.data,
          reply: m.reply,
        });
        if (got.length >= max) break;
      }
    } catch (error) {
      // Pulled messages stay pending: give them back at once.
      for (const m of got) this.ack(m, '-NAK');
      throw this.error(error, `pull from consumer ${consumer} of stream ${stream}`);
    } finally {
      clearTimeout(timer);
      sub.unsubscribe();
    }
    if (!answered) {
      const error = new Error(
        `no answer from consumer ${consumer} of stream ${stream} in ${waitMs + this.#timeoutMs} ms`,
      );
      error.name = 'TimeoutError';
      throw this.error(error, `pull from consumer ${consumer} of stream ${stream}`);
    }
    return got;
  }

  /**
   * Acknowledges a pulled message: `+ACK` done, `+WPI` still working on it (its `ack_wait` starts again),
   * `+TERM` never deliver it again, `-NAK` deliver it again now. Fire and forget: a lost acknowledgement
   * is a message delivered again, which the store recognises.
   */
  ack(m: Pick<PulledMessage, 'reply'>, kind: '+ACK' | '+WPI' | '+TERM' | '-NAK'): void {
    if (this.nc.isClosed()) return;
    try {
      this.nc.publish(m.reply, kind);
    } catch {
      // Closed or draining: the consumer delivers it again after its ack_wait.
    }
  }

  /**
   * Publishes `messages` as one atomic batch (all stored, in order, or none), in one round trip: every
   * message but the last is sent without waiting, the last carries the commit and is answered with the
   * batch's acknowledgement. `msgId` on the commit makes a retry of the same batch safe (a second copy is
   * refused as a duplicate). Needs a stream with `allow_atomic` (NATS 2.12 or later).
   */
  async atomicPublish(
    messages: readonly BatchMessage[],
    options: { msgId?: string } = {},
  ): Promise<BatchResult> {
    if (messages.length === 0) throw new Error('an atomic batch needs at least one message');
    const id = uniqueId();
    const last = messages.length - 1;
    try {
      for (let i = 0; i < last; i++) {
        const m = messages[i] as BatchMessage;
        this.nc.publish(m.subject, m.data, { headers: batchHeaders(m, id, i + 1, false) });
      }
      const m = messages[last] as BatchMessage;
      const h = batchHeaders(m, id, last + 1, true);
      if (options.msgId !== undefined) h.set('Nats-Msg-Id', options.msgId);
      const reply = await this.nc.request(m.subject, m.data, { headers: h, timeout: this.#timeoutMs });
      const ack = JSON.parse(decoder.decode(reply.data)) as {
        seq?: number;
        count?: number;
        error?: { code: number; err_code: number; description: string };
      };
      if (ack.error) {
        if (
          ack.error.err_code === JS_WRONG_LAST_SEQUENCE ||
          ack.error.err_code === JS_WRONG_LAST_SEQUENCE_PROPOSED
        )
          return { kind: 'conflict', description: ack.error.description };
        if (ack.error.err_code === JS_DUPLICATE_MESSAGE_ID) return { kind: 'duplicate' };
        throw new JetStreamApiError(ack.error);
      }
      if (ack.count !== messages.length || typeof ack.seq !== 'number')
        throw new Error(
          `the server acknowledged ${String(ack.count)} of ${messages.length} messages of an atomic batch`,
        );
      return { kind: 'stored', lastSeq: ack.seq, count: ack.count };
    } catch (error) {
      throw this.error(error, `publish an atomic batch of ${messages.length} messages`);
    }
  }

  /**
   * Messages matching `filter` from sequence `from` on, in sequence order, at most `limit` (batch direct
   * get, NATS 2.11 or later). `pending` is how many more match after the last one returned.
   */
  async range(
    stream: string,
    filter: string,
    from: number,
    limit: number,
  ): Promise<{ messages: StoredMessage[]; pending: number }> {
    return this.#batch(
      `read ${filter} from stream ${stream}`,
      async () => {
        const messages = await this.#collect(stream, {
          seq: Math.max(from, 1),
          next_by_subj: filter,
          batch: limit,
        });
        const pending = Number(messages.at(-1)?.header('Nats-Num-Pending') ?? 0);
        return { messages, pending };
      },
      { messages: [], pending: 0 },
      isNothingFrom,
    );
  }

  /**
   * The messages of one batch direct get. Through the client's callback form, which ends the reply
   * subscription when the batch ends (the iterator form keeps it, and its timer, for seconds).
   */
  #collect(stream: string, request: DirectBatchOptions | DirectLastFor): Promise<StoredMessage[]> {
    return new Promise((resolve, reject) => {
      const got: StoredMessage[] = [];
      const callback = (done: CompletionResult | null, m: StoredMsg) => {
        if (done) {
          if (done.err) reject(done.err);
          else resolve(got);
          return;
        }
        got.push(stored(m));
      };
      const sent =
        'multi_last' in request
          ? this.jsm.direct.getLastMessagesFor(stream, { ...request, callback })
          : this.jsm.direct.getBatch(stream, { ...request, callback });
      sent.catch(reject);
    });
  }

  /**
   * A batch direct get, whole or not at all. `isEmpty` tells the error that means "nothing matches" (for
   * a range, "message not found" at its first message; for `multi_last`, "no results"). For `multi_last`,
   * "message not found" means that a message it resolved was removed before it could be sent (a race with
   * a rollup or a purge): that is never taken for a short answer; the request is sent again, and after a
   * few tries the error is thrown.
   */
  async #batch<T>(
    operation: string,
    request: () => Promise<T>,
    empty: T,
    isEmpty: (error: unknown) => boolean,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await request();
      } catch (error) {
        if (isEmpty(error)) return empty;
        if (attempt >= 5 || !isRacedBatch(error)) throw this.error(error, operation);
      }
    }
  }

  /**
   * Every message matching `filter`, in sequence order, as of now, read a page at a time (batch direct
   * gets, finished by {@link #fromLeader} on a replicated stream).
   */
  async *scan(stream: string, filter: string, pageSize = 1000, start = 1): AsyncGenerator<StoredMessage> {
    let from = start;
    for (;;) {
      const { messages, pending } = await this.range(stream, filter, from, pageSize);
      yield* messages;
      const last = messages.at(-1);
      if (last) from = last.seq + 1;
      if (!last || pending === 0 || messages.length < pageSize) break;
    }
    yield* this.#fromLeader(stream, filter, from);
  }

  /**
   * The messages matching `filter` from sequence `from` on that a read answered by a replica left out, as
   * the stream's leader has them (`STREAM.MSG.GET` next by subject, one message per request), up to the
   * leader's last message when the first is found. A direct get and an ordered consumer may be served by
   * any replica, and one a little behind lacks the newest messages: what a transaction just committed
   * (the leader acknowledges once most replicas hold it). A replica applies the stream in order, so what
   * it lacks is a tail; one request confirms there is none. Nothing is asked on a stream of one replica.
   */
  async *#fromLeader(stream: string, filter: string, from: number): AsyncGenerator<StoredMessage> {
    if (this.#replicas.get(stream) === 1) return;
    const operation = `read ${filter} from the leader of stream ${stream}`;
    let through = Number.POSITIVE_INFINITY;
    for (let seq = from; seq <= through; ) {
      let m: StoredMsg | null;
      try {
        m = await nextOnSubject(this.jsm, stream, filter, seq);
      } catch (error) {
        throw this.error(error, operation);
      }
      if (!m || m.seq > through) return;
      if (through === Number.POSITIVE_INFINITY) through = await this.lastSeq(stream);
      yield stored(m);
      seq = m.seq + 1;
    }
  }

  /**
   * Every message matching `filter`, in sequence order, as of now, streamed by the server to an ordered
   * consumer of this process (one request creates it, one reads how many it has to deliver): for reads
   * of whole subject trees (listings, counts). {@link scan} asks for each page, and the server counts what
   * follows the page for each answer, which grows with the stream: a million records took a minute that
   * way. The delivery ends at the message with nothing pending after it. One that stalls (nothing for a
   * second: a message counted as pending was rolled up or expired before it was sent, or the server is
   * slow) is finished by {@link scan} from the last message received, so a read never ends short; a closed
   * connection throws.
   */
  async *sweep(stream: string, filter: string): AsyncGenerator<StoredMessage> {
    const operation = `read ${filter} from stream ${stream}`;
    let consumer: Consumer | undefined;
    let messages: ConsumerMessages;
    let total: number;
    try {
      consumer = await this.js.consumers.get(stream, {
        filter_subjects: [filter],
        inactive_threshold: SWEEP_INACTIVE_MS,
      });
      messages = await consumer.consume({ max_messages: SWEEP_BUFFER });
      const info = await consumer.info(true);
      total = info.num_pending + info.delivered.consumer_seq;
    } catch (error) {
      await consumer?.delete().catch(() => undefined);
      throw this.error(error, operation);
    }
    // A watchdog, not a timer per message; time spent by the caller between messages does not count.
    let last = performance.now();
    let withCaller = false;
    let lastSeq = 0;
    let ended = total === 0;
    let stalled = false;
    const watchdog = setInterval(() => {
      if (withCaller || performance.now() - last <= SWEEP_IDLE_MS) return;
      stalled = true;
      messages.stop();
    }, SWEEP_IDLE_MS / 4);
    try {
      if (!ended)
        for await (const m of messages) {
          lastSeq = m.seq;
          withCaller = true;
          yield stored({ subject: m.subject, seq: m.seq, time: m.time, data: m.data, header: m.headers });
          withCaller = false;
          if (m.info.pending === 0) {
            ended = true;
            break;
          }
          last = performance.now();
        }
    } finally {
      clearInterval(watchdog);
      messages.stop();
      // Gone already when the connection closed or the server dropped it: nothing left to delete then.
      const deleted = consumer.delete().catch(() => undefined);
      // After a stall the network may be what stalls: the delete is sent, not waited for (it would hold
      // the read up to the request timeout; the server drops the consumer 30 s after its reader stopped).
      if (!stalled) await deleted;
    }
    if (ended) {
      // The consumer may have run on a replica a little behind the leader.
      yield* this.#fromLeader(stream, filter, lastSeq + 1);
      return;
    }
    if (this.closed) throw this.error(new Error('the connection closed during the read'), operation);
    yield* this.scan(stream, filter, 1000, lastSeq + 1);
  }

  /**
   * The last message of each subject matching `filters` (a subject or a wildcard each), as of now
   * (batch direct get `multi_last`, NATS 2.11 or later). Asks in chunks of {@link MAX_MULTI_LAST} filters,
   * all at once. A subject without messages is absent from the answer; an answer is never partial.
   */
  async lastOf(stream: string, filters: readonly string[]): Promise<Map<string, StoredMessage>> {
    const found = new Map<string, StoredMessage>();
    const chunks: string[][] = [];
    for (let i = 0; i < filters.length; i += MAX_MULTI_LAST)
      chunks.push(filters.slice(i, i + MAX_MULTI_LAST));
    const answers = await Promise.all(
      chunks.map((chunk) =>
        this.#batch(
          `read the last messages of ${chunk.length} subjects from stream ${stream}`,
          () => this.#collect(stream, { multi_last: chunk }),
          [] as StoredMessage[],
          isNoResults,
        ),
      ),
    );
    for (const answer of answers) for (const m of answer) found.set(m.subject, m);
    return found;
  }

  /** The subjects that hold messages and match `filter`, with how many each holds. */
  async subjects(stream: string, filter: string): Promise<Map<string, number>> {
    try {
      const info = await this.jsm.streams.info(stream, { subjects_filter: filter });
      return new Map(Object.entries(info.state.subjects ?? {}));
    } catch (error) {
      throw this.error(error, `list the subjects ${filter} of stream ${stream}`);
    }
  }

  /**
   * The last message on `subject`, or undefined. With `leader`, as the stream's leader has it
   * (`STREAM.MSG.GET`, not a direct get, which a replica a little behind may answer).
   */
  async last(stream: string, subject: string, leader = false): Promise<StoredMessage | undefined> {
    try {
      const m = await (leader ? this.jsm.streams : this.jsm.direct).getMessage(stream, {
        last_by_subj: subject,
      });
      return m ? stored(m) : undefined;
    } catch (error) {
      if (leader && error instanceof Error && /no message found|not found/i.test(error.message))
        return undefined;
      throw this.error(error, `read ${subject} from ${leader ? 'the leader of ' : ''}stream ${stream}`);
    }
  }

  /** Purges `filter` (all subjects when omitted) below sequence `before` (everything when omitted). */
  async purge(stream: string, options: { filter?: string; before?: number }): Promise<number> {
    try {
      const opts: PurgeOpts | undefined =
        options.before !== undefined
          ? { seq: options.before, ...(options.filter !== undefined ? { filter: options.filter } : {}) }
          : options.filter !== undefined
            ? { filter: options.filter }
            : undefined;
      const r = await this.jsm.streams.purge(stream, opts);
      return r.purged;
    } catch (error) {
      throw this.error(error, `purge ${options.filter ?? 'all subjects'} from stream ${stream}`);
    }
  }

  async lastSeq(stream: string): Promise<number> {
    try {
      return (await this.streamInfo(stream)).state.last_seq;
    } catch (error) {
      throw this.error(error, `read the state of stream ${stream}`);
    }
  }

  /** The stream's info (its leader answers); throws the client's error. Notes its replicas for reads. */
  async streamInfo(stream: string): Promise<StreamInfo> {
    const info = await this.jsm.streams.info(stream);
    this.#replicas.set(stream, info.config.num_replicas);
    return info;
  }

  /** The stream's info ({@link streamInfo}), or undefined when there is no such stream. */
  async findStream(stream: string): Promise<StreamInfo | undefined> {
    try {
      return await this.streamInfo(stream);
    } catch (error) {
      if (isStreamNotFound(error)) return undefined;
      throw this.error(error, `read stream ${stream}`);
    }
  }

  /**
   * Creates `config` or checks an existing stream of that name: its subjects and every setting the
   * backend's correctness depends on must match; a mismatch is refused naming the setting, and the
   * stream is never changed. Concurrent creation by several processes is fine.
   */
  async ensureStream(config: StreamSettings): Promise<StreamInfo> {
    const wanted: Partial<StreamConfig> & { name: string } = {
      name: config.name,
      subjects: [...config.subjects],
      retention: RetentionPolicy.Limits,
      storage: config.storage === 'memory' ? StorageType.Memory : StorageType.File,
      discard: DiscardPolicy.Old,
      max_msgs_per_subject: config.maxPerSubject,
      num_replicas: config.replicas,
      allow_direct: true,
      duplicate_window: config.duplicateWindowMs * 1_000_000,
      max_msg_size: -1,
      ...(config.atomic ? { allow_atomic: true, allow_rollup_hdrs: true, allow_msg_ttl: true } : {}),
      ...(config.schedules ? { allow_msg_schedules: true } : {}),
    };
    let info = await this.findStream(config.name);
    if (!info) {
      info = await addOrRead(
        () => this.jsm.streams.add(wanted),
        () => this.streamInfo(config.name),
        (error) => this.error(error, `create stream ${config.name}`),
      );
      this.#replicas.set(config.name, info.config.num_replicas);
    }
    const c = info.config as StreamConfig & Record<string, unknown>;
    const mismatches: string[] = [];
    const check = (setting: string, actual: unknown, expected: unknown) => {
      if (JSON.stringify(actual) !== JSON.stringify(expected))
        mismatches.push(`${setting} is ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
    };
    check('subjects', c.subjects ?? [], config.subjects);
    check('max_msgs_per_subject', c.max_msgs_per_subject, config.maxPerSubject);
    check('allow_direct', c.allow_direct === true, true);
    check('num_replicas', c.num_replicas, config.replicas);
    check('storage', c.storage, wanted.storage);
    if (config.atomic) {
      check('allow_atomic', c.allow_atomic === true, true);
      check('allow_rollup_hdrs', c.allow_rollup_hdrs === true, true);
      check('allow_msg_ttl', c.allow_msg_ttl === true, true);
    }
    if (config.schedules) check('allow_msg_schedules', c.allow_msg_schedules === true, true);
    if (mismatches.length > 0) throw new StreamMismatchError(config.name, mismatches);
    return info;
  }
}

function batchHeaders(m: BatchMessage, id: string, sequence: number, commit: boolean): MsgHdrs {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(m.headers ?? {})) h.set(k, v);
  h.set('Nats-Batch-Id', id);
  h.set('Nats-Batch-Sequence', String(sequence));
  if (commit) h.set('Nats-Batch-Commit', '1');
  return h;
}

/**
 * A number of a JetStream acknowledgement subject: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.…`
 * (9 tokens), or with a domain and an account hash before the stream (12 or more tokens).
 */
function ackSubjectNumber(reply: string, which: 'delivered' | 'seq' | 'pending'): number {
  // $JS.ACK[.<domain>.<account>].<stream>.<consumer>.<delivered>.<seq>.<consumer seq>.<time>.<pending>[.<token>]
  const tokens = reply.split('.');
  const base = tokens.length === 9 ? 4 : 6;
  return Number(tokens[base + ACK_TOKENS[which]]);
}

const ACK_TOKENS = { delivered: 0, seq: 1, pending: 4 } as const;

/** 12 random bytes drawn once per process: what makes {@link uniqueId}s of different processes differ. */
const PROCESS_ID = randomBytes(12).toString('base64url');
let issued = 0;

/**
 * An id no other call, in this process or any other, returns: the process's random part and a counter
 * (batch ids, commit markers' message ids, timer ids). Drawing random bytes for each costs a system call.
 */
export function uniqueId(): string {
  issued++;
  return `${PROCESS_ID}${issued.toString(36)}`;
}

/** A range (`next_by_subj`) with no message from its start answers 404 "message not found". */
function isNothingFrom(error: unknown): boolean {
  return error instanceof Error && /message not found|no results/i.test(error.message);
}

/** A `multi_last` that matched nothing answers 404 "no results". */
function isNoResults(error: unknown): boolean {
  return error instanceof Error && /no results/i.test(error.message);
}

/**
 * A batch direct get that failed while the stream changed under it: a message it resolved was gone when
 * it was to be sent (404 "message not found"), or the request timed out. Worth sending again.
 */
function isRacedBatch(error: unknown): boolean {
  return (
    error instanceof Error &&
    (/message not found/i.test(error.message) ||
      error.name === 'TimeoutError' ||
      /timeout/i.test(error.message))
  );
}

function stored(m: {
  subject: string;
  seq: number;
  time: Date;
  data: Uint8Array;
  header: MsgHdrs | undefined;
}): StoredMessage {
  return {
    subject: m.subject,
    seq: m.seq,
    // Parsed when asked (the clock probe, leases, cursors, listings): a claim never needs it.
    get time() {
      return m.time.getTime();
    },
    data: m.data,
    header: (name) => {
      const v = m.header?.get(name);
      return v === '' ? undefined : v;
    },
    json: <T>() => JSON.parse(decoder.decode(m.data)) as T,
  };
}

/** Calls `handle` with every status change of `nc` until the returned function is called. */
export function onStatus(
  nc: NatsConnection,
  handle: (status: { type: string; server?: string }) => void,
): () => void {
  const statuses = nc.status() as AsyncIterable<{ type: string; server?: string }> & { stop?: () => void };
  let stopped = false;
  void (async () => {
    try {
      for await (const status of statuses) {
        if (stopped) break;
        handle(status);
      }
    } catch {
      // The iterator ends with the connection.
    }
  })();
  return () => {
    stopped = true;
    statuses.stop?.();
  };
}
