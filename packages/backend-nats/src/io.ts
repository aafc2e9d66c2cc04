import {
  DiscardPolicy,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  type PurgeOpts,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
  type StreamInfo,
} from '@nats-io/jetstream';
import { type MsgHdrs, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { isStreamNotFound, isWrongLastSequence, toDuetimeError } from './errors.js';

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

/** Published, or refused because an expectation header did not hold. */
export type PublishResult = { seq: number; duplicate: boolean } | 'conflict';

const decoder = new TextDecoder();

/**
 * The few JetStream calls the backend makes, each mapping client errors to duetime errors that name the
 * operation and the server. Keeps the rest of the package free of client details.
 */
export class NatsIo {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly server: string;
  #closed = false;

  private constructor(nc: NatsConnection, jsm: JetStreamManager, timeoutMs: number) {
    this.nc = nc;
    this.jsm = jsm;
    this.js = jetstream(nc, { timeout: timeoutMs });
    this.server = nc.getServer();
  }

  static async open(nc: NatsConnection, timeoutMs: number): Promise<NatsIo> {
    try {
      const jsm = await jetstreamManager(nc, { timeout: timeoutMs });
      return new NatsIo(nc, jsm, timeoutMs);
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

  /** The last message on `subject`, or undefined. */
  async last(stream: string, subject: string): Promise<StoredMessage | undefined> {
    try {
      const m = await this.jsm.direct.getMessage(stream, { last_by_subj: subject });
      return m ? stored(m) : undefined;
    } catch (error) {
      throw this.error(error, `read ${subject} from stream ${stream}`);
    }
  }

  /** The message at `seq`, or undefined when there is none (purged or never written). */
  async at(stream: string, seq: number): Promise<StoredMessage | undefined> {
    try {
      const m = await this.jsm.direct.getMessage(stream, { seq });
      return m ? stored(m) : undefined;
    } catch (error) {
      throw this.error(error, `read message ${seq} from stream ${stream}`);
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
      return (await this.jsm.streams.info(stream)).state.last_seq;
    } catch (error) {
      throw this.error(error, `read the state of stream ${stream}`);
    }
  }

  /**
   * Creates `config` or checks an existing stream of that name: its subjects and the settings the
   * backend's correctness depends on must match. Concurrent creation by several processes is fine.
   */
  async ensureStream(config: StreamSettings): Promise<StreamInfo> {
    const wanted: Partial<StreamConfig> & { name: string } = {
      name: config.name,
      subjects: config.subjects,
      retention: RetentionPolicy.Limits,
      storage: config.storage === 'memory' ? StorageType.Memory : StorageType.File,
      discard: DiscardPolicy.Old,
      max_msgs_per_subject: config.maxPerSubject,
      num_replicas: config.replicas,
      allow_direct: true,
      duplicate_window: config.duplicateWindowMs * 1_000_000,
      max_msg_size: -1,
    };
    let info: StreamInfo | undefined;
    try {
      info = await this.jsm.streams.info(config.name);
    } catch (error) {
      if (!isStreamNotFound(error)) throw this.error(error, `read stream ${config.name}`);
    }
    if (!info) {
      try {
        info = await this.jsm.streams.add(wanted);
      } catch (error) {
        // Another process may have created it first.
        try {
          info = await this.jsm.streams.info(config.name);
        } catch {
          throw this.error(error, `create stream ${config.name}`);
        }
      }
    }
    const c = info.config;
    const subjectsMatch = JSON.stringify(c.subjects ?? []) === JSON.stringify(config.subjects);
    if (!subjectsMatch || c.max_msgs_per_subject !== config.maxPerSubject || c.allow_direct !== true)
      throw this.error(
        new Error(
          `stream ${config.name} exists with subjects ${JSON.stringify(c.subjects)}, max_msgs_per_subject ${c.max_msgs_per_subject} and allow_direct ${c.allow_direct}; expected ${JSON.stringify(config.subjects)}, ${config.maxPerSubject} and true (another application uses this prefix?)`,
        ),
        `check stream ${config.name}`,
      );
    return info;
  }
}

/** Publishes the one message of `subject` unless it exists (see {@link Layout.logAnchor}). */
export async function ensureAnchor(io: NatsIo, subject: string): Promise<void> {
  await io.publish(subject, '', { expectSubjectSeq: 0 });
}

export interface StreamSettings {
  name: string;
  subjects: string[];
  maxPerSubject: number;
  storage: 'file' | 'memory';
  replicas: number;
  duplicateWindowMs: number;
}

function stored(m: {
  subject: string;
  seq: number;
  time: Date;
  data: Uint8Array;
  header: MsgHdrs;
}): StoredMessage {
  return {
    subject: m.subject,
    seq: m.seq,
    time: m.time.getTime(),
    data: m.data,
    header: (name) => {
      const v = m.header.get(name);
      return v === '' ? undefined : v;
    },
    json: <T>() => JSON.parse(decoder.decode(m.data)) as T,
  };
}
