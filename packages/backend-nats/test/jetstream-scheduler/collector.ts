import type {
  ConsumeFiredOptions,
  DeadLetterReason,
  FiredConsumer,
  FiredInfo,
  JetStreamScheduler,
} from '../../src/jetstream-scheduler/index.js';

/** One handler call as a test saw it. */
export interface Call {
  key: string;
  payload: unknown;
  firedId: string;
  info: FiredInfo;
  at: number;
}

/** One dead-letter call as a test saw it. */
export interface DeadLetter {
  key: string;
  reason: DeadLetterReason;
  deliveries: number;
  error: unknown;
  firedId: string;
}

/**
 * Runs `consumeFired` and records every call. `behave` decides what the handler does with a call (return to
 * ack, throw to fail); by default it acks.
 */
export class Collector {
  readonly calls: Call[] = [];
  readonly deadLetters: DeadLetter[] = [];
  consumer: FiredConsumer | undefined;

  static async start(
    scheduler: JetStreamScheduler,
    durable: string,
    maxDeliver = 5,
    behave: (call: Call) => unknown = () => undefined,
    options: ConsumeFiredOptions = { retryDelay: 50 },
  ): Promise<Collector> {
    const collector = new Collector();
    collector.consumer = await scheduler.consumeFired(
      durable,
      maxDeliver,
      (key, reason, deliveries, info) => {
        collector.deadLetters.push({ key, reason, deliveries, error: info.error, firedId: info.firedId });
      },
      async (key, payload, firedId, info) => {
        const call = { key, payload, firedId, info, at: Date.now() };
        collector.calls.push(call);
        await behave(call);
      },
      options,
    );
    return collector;
  }

  forKey(key: string): Call[] {
    return this.calls.filter((c) => c.key === key);
  }

  /** Distinct fired messages seen (redeliveries counted once). */
  firedIds(key?: string): string[] {
    return [...new Set((key === undefined ? this.calls : this.forKey(key)).map((c) => c.firedId))];
  }

  async stop(): Promise<void> {
    await this.consumer?.stop();
  }
}
