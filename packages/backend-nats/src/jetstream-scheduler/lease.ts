import { type Clock, type Logger, sleep } from '@duetime/core';
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { isWrongLastSequence } from './errors.js';
import { H } from './headers.js';

/** Callbacks of a {@link PumpLease}. */
export interface PumpLeaseEvents {
  /** This process became the pump. */
  acquired(): void;
  /** This process is no longer the pump (another took over, or it could not renew in time). */
  lost(): void;
}

export interface PumpLeaseOptions {
  connection: NatsConnection;
  stream: string;
  subject: string;
  owner: string;
  ttlMs: number;
  clock: Clock;
  logger: Logger;
  events: PumpLeaseEvents;
}

interface Observed {
  seq: number;
  owner: string;
}

/**
 * A lease on one subject of the scheduler's stream, electing the process that runs the emulated pump.
 *
 * The lease is the last message on `<prefix>.sched.pump` (rolled up, so one message stays). Every write is
 * conditional on the sequence last read (`Nats-Expected-Last-Subject-Sequence`), so two processes never both
 * succeed from the same state. The holder rewrites it every `ttl / 3`. A waiting process takes over only
 * after it has seen the same sequence for a whole `ttl` on its own clock; the holder stops pumping once
 * `ttl` has passed, on its clock, since the start of its last successful write. Each side measures only
 * elapsed time on its own clock, so clock skew between hosts does not matter (only the rates, allowed a
 * 10% margin). A released lease (empty owner) is taken at once.
 */
export class PumpLease {
  readonly #o: PumpLeaseOptions;
  readonly #js: JetStreamClient;
  #jsm: JetStreamManager | undefined;
  readonly #abort = new AbortController();
  #loop: Promise<void> | undefined;
  #leader = false;
  #validUntil = 0;
  #heldSeq = 0;
  #seen: Observed | undefined;
  #seenSince = 0;

  constructor(options: PumpLeaseOptions) {
    this.#o = options;
    this.#js = jetstream(options.connection);
  }

  /** Whether this process holds the lease and its last renewal is recent enough to act on. */
  get isLeader(): boolean {
    return this.#leader && this.#o.clock.now() < this.#validUntil;
  }

  /** Whether this process won the lease and has not lost it (its last renewal may be overdue). */
  get holding(): boolean {
    return this.#leader;
  }

  start(): void {
    this.#loop ??= this.#run();
  }

  /** Stops campaigning; a holder releases the lease so another process takes over at once. */
  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#loop;
    if (this.#leader) {
      this.#setLeader(false);
      await this.#write('', this.#heldSeq).catch(() => undefined);
    }
  }

  async #run(): Promise<void> {
    const period = Math.max(10, Math.floor(this.#o.ttlMs / 3));
    while (!this.#abort.signal.aborted) {
      try {
        await this.#tick();
      } catch (error) {
        this.#o.logger.warn('jetstream scheduler: pump lease check failed', { error });
      }
      if (this.#leader && this.#o.clock.now() >= this.#validUntil) this.#setLeader(false);
      await sleep(this.#o.clock, period, this.#abort.signal);
    }
  }

  async #tick(): Promise<void> {
    const clock = this.#o.clock;
    if (this.#leader) {
      const started = clock.now();
      const seq = await this.#write(this.#o.owner, this.#heldSeq);
      if (seq === undefined) this.#setLeader(false);
      else {
        this.#heldSeq = seq;
        this.#validUntil = started + Math.floor(this.#o.ttlMs * 0.9);
      }
      return;
    }
    const current = await this.#read();
    const now = clock.now();
    if (!this.#seen || !current || current.seq !== this.#seen.seq) {
      this.#seen = current;
      this.#seenSince = now;
    }
    const free = !current || current.owner === '';
    if (!free && now - this.#seenSince < this.#o.ttlMs) return;
    const started = clock.now();
    const seq = await this.#write(this.#o.owner, current?.seq ?? 0);
    if (seq === undefined) return;
    this.#heldSeq = seq;
    this.#validUntil = started + Math.floor(this.#o.ttlMs * 0.9);
    this.#setLeader(true);
  }

  #setLeader(leader: boolean): void {
    if (leader === this.#leader) return;
    this.#leader = leader;
    if (leader) this.#o.events.acquired();
    else this.#o.events.lost();
  }

  async #read(): Promise<Observed | undefined> {
    this.#jsm ??= await jetstreamManager(this.#o.connection);
    const msg = await this.#jsm.streams.getMessage(this.#o.stream, { last_by_subj: this.#o.subject });
    if (!msg) return undefined;
    return { seq: msg.seq, owner: msg.header.get(H.owner) ?? '' };
  }

  /** Writes the lease if its last sequence is still `expected`; returns the new sequence, or undefined when it moved. */
  async #write(owner: string, expected: number): Promise<number | undefined> {
    const h = headers();
    h.set(H.owner, owner);
    h.set(H.rollup, 'sub');
    try {
      const ack = await this.#js.publish(this.#o.subject, undefined, {
        headers: h,
        expect: { lastSubjectSequence: expected },
      });
      return ack.seq;
    } catch (error) {
      if (isWrongLastSequence(error)) return undefined;
      throw error;
    }
  }
}
