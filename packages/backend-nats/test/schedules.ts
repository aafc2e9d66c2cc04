import { waitFor } from '@duetime/conformance';
import {
  AckPolicy,
  type Consumer,
  type ConsumerMessages,
  DeliverPolicy,
  JetStreamApiError,
  type JetStreamManager,
  type JsMsg,
  jetstream,
  jetstreamManager,
  StorageType,
} from '@nats-io/jetstream';
import { type MsgHdrs, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';

/**
 * Test support for JetStream message schedules (ADR-51, NATS >= 2.12): a stream that allows them, the
 * headers of a one-shot schedule, and a durable pull consumer that logs what the server fires.
 */

/** Creates a stream `name` over `name.>` with message schedules, atomic batches and rollups allowed. */
export async function scheduleStream(
  jsm: JetStreamManager,
  name: string,
  options: { replicas?: number; storage?: 'file' | 'memory' } = {},
): Promise<void> {
  await jsm.streams.add({
    name,
    subjects: [`${name}.>`],
    num_replicas: options.replicas ?? 1,
    storage: options.storage === 'memory' ? StorageType.Memory : StorageType.File,
    allow_msg_schedules: true,
    allow_atomic: true,
    allow_rollup_hdrs: true,
    allow_direct: true,
    allow_msg_ttl: true,
  });
  await untilServed(jsm, name);
}

/**
 * Waits until the stream answers a publish through `jsm`'s connection: a replicated stream's subjects
 * reach every server of a cluster a moment after it is created, and a publish before that finds no
 * responders. The probe expects another stream's name, so the stream refuses it and stores nothing.
 */
export async function untilServed(jsm: JetStreamManager, name: string): Promise<void> {
  const js = jsm.jetstream();
  await waitFor(
    `stream ${name} to answer a publish`,
    async () => {
      const answer = await js
        .publish(`${name}.probe`, '', { expect: { streamName: `${name}-not` }, timeout: 2000 })
        .then(
          () => 'stored' as const,
          (error: unknown) => (error instanceof JetStreamApiError ? ('refused' as const) : undefined),
        );
      if (answer === 'stored') throw new Error(`stream ${name} stored a probe that expected another stream`);
      return answer === 'refused';
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

/** The headers of a one-shot schedule firing into `target` at `dueMs` (plus `extra` headers). */
export function oneShot(
  dueMs: number,
  target: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    'Nats-Schedule': `@at ${new Date(dueMs).toISOString()}`,
    'Nats-Schedule-Target': target,
    ...extra,
  };
}

export function toHeaders(values: Record<string, string>): MsgHdrs {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(values)) h.set(k, v);
  return h;
}

/** A message the server fired, as a consumer received it. */
export interface Fired {
  subject: string;
  seq: number;
  data: string;
  headers: Record<string, string>;
  /** The server's timestamp of the fired message, ms since the epoch (fractional). */
  storedMs: number;
  /** When this process received it, ms since the epoch. */
  receivedMs: number;
}

/**
 * A durable pull consumer on `filter` that acknowledges and logs every message it gets. The consumer is
 * created at once (before any fire), so it sees every fire from the stream's start.
 */
export class FireLog {
  readonly fired: Fired[] = [];
  readonly #messages: ConsumerMessages;
  readonly #done: Promise<void>;

  private constructor(messages: ConsumerMessages) {
    this.#messages = messages;
    this.#done = (async () => {
      for await (const m of messages) {
        const h: Record<string, string> = {};
        for (const k of m.headers?.keys() ?? []) h[k] = m.headers?.get(k) ?? '';
        this.fired.push({
          subject: m.subject,
          seq: m.seq,
          data: m.string(),
          headers: h,
          storedMs: m.info.timestampNanos / 1e6,
          receivedMs: Date.now(),
        });
        m.ack();
      }
    })();
  }

  static async start(
    nc: NatsConnection,
    stream: string,
    filter: string,
    durable = 'fires',
  ): Promise<FireLog> {
    const jsm = await jetstreamManager(nc);
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: filter,
    });
    const consumer: Consumer = await jetstream(nc).consumers.get(stream, durable);
    return new FireLog(await consumer.consume({ max_messages: 256, expires: 2000 }));
  }

  /** The fires whose `Nats-Scheduler` (the schedule's subject) is `subject`. */
  of(subject: string): Fired[] {
    return this.fired.filter((f) => f.headers['Nats-Scheduler'] === subject);
  }

  /** Waits until a fire of schedule subject `subject` came in. */
  async waitFor(subject: string, timeoutMs = 30_000): Promise<Fired> {
    await waitFor(`a fire of ${subject}`, () => this.of(subject).length > 0, { timeoutMs, intervalMs: 25 });
    return this.of(subject)[0] as Fired;
  }

  /** Waits until every subject of `subjects` fired at least once. */
  async waitForAll(subjects: readonly string[], timeoutMs = 60_000): Promise<void> {
    await waitFor(
      `fires of ${subjects.length} schedules`,
      () => {
        const seen = new Set(this.fired.map((f) => f.headers['Nats-Scheduler']));
        return subjects.every((s) => seen.has(s));
      },
      { timeoutMs, intervalMs: 50 },
    );
  }

  async stop(): Promise<void> {
    this.#messages.stop();
    await this.#done.catch(() => {});
  }
}

/** `p50 / p99 / max` of `values` (ms), formatted for the test output. */
export function distribution(values: readonly number[]): {
  p50: number;
  p99: number;
  max: number;
  text: string;
} {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;
  const p50 = at(0.5);
  const p99 = at(0.99);
  const max = sorted.at(-1) ?? Number.NaN;
  const ms = (v: number) => `${v.toFixed(1)} ms`;
  return { p50, p99, max, text: `p50 ${ms(p50)}, p99 ${ms(p99)}, max ${ms(max)} (n=${sorted.length})` };
}

/**
 * A durable consumer of `filter` holding what it gets as claims: fetched, not acknowledged (redelivered
 * after `ackWaitMs` unless acknowledged or kept in progress).
 */
export async function claimConsumer(
  nc: NatsConnection,
  stream: string,
  filter: string,
  durable: string,
  ackWaitMs: number,
): Promise<Consumer> {
  await (await jetstreamManager(nc)).consumers.add(stream, {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: ackWaitMs * 1_000_000,
    filter_subject: filter,
  });
  return jetstream(nc).consumers.get(stream, durable);
}

/** Fetches from `consumer` until `count` messages came, acknowledging none (failed fetches are retried). */
export async function fetchClaims(consumer: Consumer, count: number, timeoutMs = 30_000): Promise<JsMsg[]> {
  const got: JsMsg[] = [];
  await waitFor(
    `${count} deliveries`,
    async () => {
      for await (const m of await consumer.fetch({ max_messages: count - got.length, expires: 1000 }))
        got.push(m);
      return got.length >= count;
    },
    { timeoutMs, intervalMs: 50 },
  );
  return got;
}
