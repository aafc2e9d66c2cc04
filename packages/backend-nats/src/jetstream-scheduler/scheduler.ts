import { randomBytes } from 'node:crypto';
import {
  assertJson,
  BackendError,
  ClosedError,
  CronSyntaxError,
  duration,
  InvalidArgumentError,
  MAX_MESSAGE_BYTES,
  validDate,
} from '@duetime/core';
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import {
  type ConnectNatsOptions,
  checkConnection,
  connectNats,
  type NatsServers,
  requireJetStream,
  serverVersion,
} from '../connection.js';
import { apiCode, isNotFound, JS_SCHEDULE_PATTERN_INVALID, toBackendError } from '../errors.js';
import {
  type ConsumeFiredOptions,
  consumeFired,
  type DeadLetterHandler,
  type FiredConsumer,
  type FiredHandler,
} from './consume.js';
import { parseCron6 } from './cron.js';
import { deleteOnSubject } from './delete.js';
import { atSchedule, H } from './headers.js';
import {
  type JetStreamSchedulerOptions,
  type ResolvedOptions,
  resolveOptions,
  type ScheduledCron,
  type ScheduledTimer,
  type SchedulerInfo,
} from './options.js';
import { EmulatedPump } from './pump.js';
import { ensureSchedulerStream, type StreamSetup } from './stream.js';
import { SubjectLayout, tokenFor, validName } from './subjects.js';

/**
 * Timers and cron schedules that live in one JetStream stream and fire messages to per-key subjects.
 *
 * On NATS >= 2.12 the server runs them (ADR-51 message schedules); on older servers a lease-elected pump
 * inside the library does, with the same API and guarantees. See docs/jetstream-scheduler.md.
 *
 * @example
 * const scheduler = new JetStreamScheduler(nc, { prefix: 'shop' });
 * await scheduler.ensureStream();
 * await scheduler.after('order/42/expire', 15 * 60_000, { orderId: 42 });
 * const consumer = await scheduler.consumeFired('expiry', 5, onDeadLetter, async (key, payload) => {...});
 */
export class JetStreamScheduler {
  readonly #nc: NatsConnection;
  readonly #o: ResolvedOptions;
  readonly #layout: SubjectLayout;
  readonly #js: JetStreamClient;
  #jsm: JetStreamManager | undefined;
  #setup: Promise<StreamSetup> | undefined;
  #pump: EmulatedPump | undefined;
  readonly #consumers = new Set<FiredConsumer>();
  #closed = false;
  #ownsConnection = false;

  /**
   * Connects to `servers` and returns a scheduler that closes the connection on `close()`.
   * @throws {InvalidArgumentError} for a malformed URL; {@link BackendError} when no server answers.
   */
  static async connect(
    servers: NatsServers,
    options: JetStreamSchedulerOptions & ConnectNatsOptions = {},
  ): Promise<JetStreamScheduler> {
    const { connectTimeoutMs, name, maxReconnectAttempts, reconnectTimeWaitMs, ...rest } = options;
    const nc = await connectNats(servers, {
      connectTimeoutMs,
      name,
      maxReconnectAttempts,
      reconnectTimeWaitMs,
    });
    try {
      const scheduler = new JetStreamScheduler(nc, rest);
      scheduler.#ownsConnection = true;
      return scheduler;
    } catch (error) {
      await nc.close();
      throw error;
    }
  }

  /** The NATS connection this scheduler uses. */
  get connection(): NatsConnection {
    return this.#nc;
  }

  constructor(connection: NatsConnection, options: JetStreamSchedulerOptions = {}) {
    checkConnection(connection);
    this.#nc = connection;
    this.#o = resolveOptions(options);
    this.#layout = new SubjectLayout(this.#o.prefix);
    this.#js = jetstream(connection);
  }

  /** The stream's name. */
  get stream(): string {
    return this.#o.stream;
  }

  /** Whether this process currently runs the emulated pump (always false in native mode). */
  get isPumpLeader(): boolean {
    return this.#pump?.isLeader ?? false;
  }

  /** Messages the pump in this process has fired. */
  get pumpFiredCount(): number {
    return this.#pump?.firedCount ?? 0;
  }

  /**
   * Creates the stream (or checks an existing one), decides the mode and, in emulated mode, starts this
   * process's candidacy for the pump. Safe to call many times; the other methods call it on first use.
   *
   * @throws {NotSupportedError} for mode `native` on a server without message schedules.
   * @throws {InvalidArgumentError} for an existing stream that cannot hold timers (an age limit, another mode).
   * @throws {BackendError} when the server cannot be reached or refuses.
   */
  async ensureStream(): Promise<SchedulerInfo> {
    this.#checkOpen();
    this.#setup ??= this.#ensure();
    const setup = this.#setup;
    try {
      return { ...(await setup), stream: this.#o.stream, prefix: this.#layout.prefix };
    } catch (error) {
      if (this.#setup === setup) this.#setup = undefined; // let a later call retry
      throw error;
    }
  }

  async #ensure(): Promise<StreamSetup> {
    if (this.#nc.isClosed())
      throw new BackendError('ensure scheduler stream', `the NATS connection to ${this.#server()} is closed`);
    const version = serverVersion(this.#nc);
    requireJetStream(this.#nc, 'ensure scheduler stream');
    try {
      this.#jsm ??= await jetstreamManager(this.#nc, { timeout: 5_000 });
    } catch (error) {
      throw toBackendError(`open JetStream at ${this.#server()}`, error);
    }
    const setup = await ensureSchedulerStream(
      this.#jsm,
      {
        name: this.#o.stream,
        layout: this.#layout,
        duplicateWindowMs: this.#o.duplicateWindow,
        replicas: this.#o.replicas,
        storage: this.#o.storage,
      },
      this.#o.mode,
      version,
    );
    const grace = this.#o.missedTickGrace ?? Math.min(5_000, Math.floor(setup.duplicateWindowMs / 2));
    if (grace >= setup.duplicateWindowMs)
      throw new InvalidArgumentError(
        'options.missedTickGrace',
        grace,
        `must be below the stream's dedup window (${setup.duplicateWindowMs} ms)`,
      );
    const kinds = { once: setup.mode === 'emulated', cron: setup.cronMode === 'emulated' };
    if (this.#o.pump && (kinds.once || kinds.cron) && !this.#closed) {
      this.#pump = new EmulatedPump({
        connection: this.#nc,
        stream: this.#o.stream,
        layout: this.#layout,
        kinds,
        owner: `${this.#nc.info?.client_id ?? 'c'}-${randomBytes(6).toString('hex')}`,
        leaseTtlMs: this.#o.leaseTtl,
        missedTickGraceMs: grace,
        concurrency: this.#o.pumpConcurrency,
        clock: this.#o.clock,
        logger: this.#o.logger,
      });
      this.#pump.start();
    }
    return setup;
  }

  /**
   * Fires `payload` to `fireSubject(key)` once, `ms` from now. Timers for one key never replace each other.
   * @throws {InvalidArgumentError} naming `key`, `ms` or `payload`.
   */
  async after(key: string, ms: number, payload?: unknown): Promise<ScheduledTimer> {
    const delay = duration('ms', ms, { allowZero: true });
    return this.#once(key, this.#o.clock.now() + delay, payload, undefined);
  }

  /**
   * Fires `payload` to `fireSubject(key)` once at `when`. A time in the past fires at once.
   * @throws {InvalidArgumentError} naming `key`, `when` or `payload`.
   */
  async at(key: string, when: Date, payload?: unknown): Promise<ScheduledTimer> {
    return this.#once(key, validDate('when', when).getTime(), payload, undefined);
  }

  /**
   * Like {@link at}, deduplicated by `msgId` (per key): a republish inside the stream's dedup window is
   * dropped (`duplicate: true`) and the first one's `when` and payload stand. Later, the same id replaces a
   * pending timer of that id, or schedules a new one if it already fired.
   */
  async atId(key: string, msgId: string, when: Date, payload?: unknown): Promise<ScheduledTimer> {
    const idToken = tokenFor('msgId', msgId, 'name');
    return this.#once(key, validDate('when', when).getTime(), payload, idToken);
  }

  async #once(
    key: string,
    due: number,
    payload: unknown,
    idToken: string | undefined,
  ): Promise<ScheduledTimer> {
    const keyToken = tokenFor('key', key, 'key');
    const body = encodePayload(payload);
    const setup = await this.#ready();
    const id = idToken === undefined ? newTimerId() : `=${idToken}`;
    const timer = `${keyToken}.${id}`;
    const subject = this.#layout.once(keyToken, id);
    const target = this.#layout.fire(keyToken);
    const h = headers();
    h.set(H.timer, timer);
    h.set(H.due, String(due));
    h.set(H.target, target);
    if (setup.mode === 'native') {
      // The server replaces an earlier schedule on the same subject (an `atId` outside the dedup window).
      h.set(H.rollup, 'sub');
      // Fired `fireAheadMs` early, it waits in consumeFired until `Duetime-Due` (see the option).
      h.set(H.schedule, atSchedule(due - this.#o.fireAheadMs));
      h.set(H.scheduleTarget, target);
    }
    // Emulated: no rollup (NATS 2.9 applies a rollup before it drops a duplicate, which would delete the
    // original); the pump fires only the newest definition of an `atId` subject instead.
    const ack = await this.#publish('schedule a timer', subject, body, h, idToken ? `a:${timer}` : undefined);
    return { key, timer, due: new Date(due), subject, sequence: ack.seq, duplicate: ack.duplicate };
  }

  /**
   * Fires `payload` to `fireSubject(key)` on every tick of a 6-field cron expression
   * (`second minute hour day-of-month month day-of-week`) in UTC. A definition replaces any earlier one of
   * the same `name`. Ticks missed while nothing could fire them are skipped, not caught up.
   * @throws {CronSyntaxError} for a bad expression; {@link InvalidArgumentError} naming `name`, `key`, `payload`.
   */
  async cron(name: string, key: string, expr6: string, payload?: unknown): Promise<ScheduledCron> {
    const nameToken = tokenFor('name', name, 'name');
    const keyToken = tokenFor('key', key, 'key');
    const spec = parseCron6(expr6);
    const body = encodePayload(payload);
    const setup = await this.#ready();
    const expression = expr6.trim().split(/\s+/).join(' ');
    const next = spec.next(new Date(this.#o.clock.now()));
    if (!next) throw new CronSyntaxError('expression', expr6, 'has no future tick', expr6);
    const subject = this.#layout.cron(nameToken);
    const target = this.#layout.fire(keyToken);
    const h = headers();
    h.set(H.cron, nameToken);
    h.set(H.cronExpr, expression);
    h.set(H.target, target);
    if (setup.cronMode === 'native') {
      h.set(H.rollup, 'sub');
      h.set(H.schedule, expression);
      h.set(H.scheduleTarget, target);
    } else h.set(H.due, String(next.getTime()));
    try {
      const ack = await this.#publish('define a cron schedule', subject, body, h, undefined);
      // Emulated: the earlier definitions of the name are deleted one by one, not rolled up (see
      // delete.ts). The pump fires only the newest definition of a subject and deletes older ones it
      // meets, so this clean-up may fail without harm: the definition is in.
      if (setup.cronMode === 'emulated')
        await this.#deleteOn(subject, ack.seq).catch((error: unknown) =>
          this.#o.logger.warn('jetstream scheduler: older cron definitions left for the pump to delete', {
            subject,
            error,
          }),
        );
      return { name, key, expression, next, subject, sequence: ack.seq };
    } catch (error) {
      if (apiCode((error as Error).cause) === JS_SCHEDULE_PATTERN_INVALID)
        throw new CronSyntaxError('expression', expr6, 'the server rejected the schedule pattern', expr6);
      throw error;
    }
  }

  /** Removes the cron definition `name` (no-op if absent). Returns whether one was removed. */
  async cancelCron(name: string): Promise<boolean> {
    const subject = this.#layout.cron(tokenFor('name', name, 'name'));
    const setup = await this.#ready();
    return (await (setup.cronMode === 'native' ? this.#purge(subject) : this.#deleteOn(subject))) > 0;
  }

  /** Removes every pending one-shot timer of `key`; returns how many. Fired messages are untouched. */
  async cancelTimers(key: string): Promise<number> {
    const subject = this.#layout.onceForKey(tokenFor('key', key, 'key'));
    const setup = await this.#ready();
    return setup.mode === 'native' ? this.#purge(subject) : this.#deleteOn(subject);
  }

  /** The subject `key`'s timers and cron ticks fire to: `<prefix>.sched.fire.<encoded key>`. */
  fireSubject(key: string): string {
    return this.#layout.fire(tokenFor('key', key, 'key'));
  }

  /**
   * Runs `handler(key, payload, firedId, info)` for every fired message through the durable pull consumer
   * `durable` (created on first use; several processes may share it). An error redelivers the message after
   * a growing delay; an error with `terminal === true` (see `Terminal()`), or the `maxDeliver`-th failed
   * delivery, calls `onDeadLetter(key, reason, deliveries, info)` and then terminates the message.
   */
  async consumeFired(
    durable: string,
    maxDeliver: number,
    onDeadLetter: DeadLetterHandler,
    handler: FiredHandler,
    options: ConsumeFiredOptions = {},
  ): Promise<FiredConsumer> {
    validName('durable', durable);
    await this.#ready();
    const consumer = await consumeFired(
      {
        js: this.#js,
        jsm: this.#jsm as JetStreamManager,
        stream: this.#o.stream,
        layout: this.#layout,
        logger: this.#o.logger,
        now: () => this.#o.clock.now(),
      },
      durable,
      maxDeliver,
      onDeadLetter,
      handler,
      options,
    );
    this.#consumers.add(consumer);
    void consumer.closed.then(() => this.#consumers.delete(consumer));
    return consumer;
  }

  /**
   * Purges fired messages at or below `durable`'s ack floor (every one of them acknowledged or terminated
   * by that consumer). Definitions, pending timers and fired messages not yet acknowledged are never
   * touched. Returns how many messages were purged. Other consumers of the fire subjects are not consulted.
   */
  async reclaimFired(durable: string): Promise<number> {
    validName('durable', durable);
    await this.#ready();
    const jsm = this.#jsm as JetStreamManager;
    let floor: number;
    try {
      floor = (await jsm.consumers.info(this.#o.stream, durable)).ack_floor.stream_seq;
    } catch (error) {
      if (isNotFound(error))
        throw new InvalidArgumentError('durable', durable, `no such consumer on stream ${this.#o.stream}`);
      throw toBackendError(`read consumer ${durable}`, error);
    }
    if (floor <= 0) return 0;
    return this.#purge(this.#layout.fireAll, floor + 1, `purge fired messages of stream ${this.#o.stream}`);
  }

  /**
   * Stops the pump (releasing its lease) and every `consumeFired` loop. The connection stays open, unless
   * the scheduler made it (`JetStreamScheduler.connect`).
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#stopWork();
    if (this.#ownsConnection) await this.#nc.close();
  }

  async #stopWork(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#consumers].map((c) => c.stop()));
    await this.#pump?.stop();
  }

  /**
   * Closes the scheduler and deletes its stream with every timer, cron definition and fired message in
   * it. Meant for tests, probes and teardown; other processes using the prefix lose their schedules too.
   */
  async destroy(): Promise<void> {
    await this.ensureStream();
    const jsm = this.#jsm as JetStreamManager;
    await this.#stopWork();
    try {
      await jsm.streams.delete(this.#o.stream);
    } catch (error) {
      if (!isNotFound(error)) throw toBackendError(`delete stream ${this.#o.stream}`, error);
    } finally {
      if (this.#ownsConnection) await this.#nc.close();
    }
  }

  async #ready(): Promise<StreamSetup> {
    this.#checkOpen();
    await this.ensureStream();
    return this.#setup as Promise<StreamSetup>;
  }

  #checkOpen(): void {
    if (this.#closed) throw new ClosedError('JetStreamScheduler');
  }

  #server(): string {
    return this.#nc.getServer?.() ?? 'the NATS server';
  }

  async #publish(
    operation: string,
    subject: string,
    body: Uint8Array,
    h: MsgHdrs,
    msgID: string | undefined,
  ) {
    try {
      return await this.#js.publish(subject, body, { headers: h, ...(msgID ? { msgID } : {}) });
    } catch (error) {
      throw toBackendError(`${operation} on ${subject}`, error);
    }
  }

  /** Deletes the messages on `subject` below `below`, one by one: the emulated mode's purge (delete.ts). */
  async #deleteOn(subject: string, below?: number): Promise<number> {
    try {
      return await deleteOnSubject(this.#jsm as JetStreamManager, this.#o.stream, subject, below);
    } catch (error) {
      throw toBackendError(`delete ${subject}`, error);
    }
  }

  /** Purges `filter` (below `seq` when given); failures are reported as `operation`. */
  async #purge(filter: string, seq?: number, operation = `purge ${filter}`): Promise<number> {
    try {
      const opts = seq === undefined ? { filter } : { filter, seq };
      return (await (this.#jsm as JetStreamManager).streams.purge(this.#o.stream, opts)).purged;
    } catch (error) {
      throw toBackendError(operation, error);
    }
  }
}

const utf8 = new TextEncoder();

function encodePayload(payload: unknown): Uint8Array {
  const value = payload === undefined ? null : payload;
  assertJson('payload', value);
  const bytes = utf8.encode(JSON.stringify(value));
  if (bytes.length > MAX_MESSAGE_BYTES)
    throw new InvalidArgumentError(
      'payload',
      payload,
      `is ${bytes.length} bytes as JSON, more than ${MAX_MESSAGE_BYTES}`,
    );
  return bytes;
}

/** A time-ordered unique timer id (subject-token safe). */
function newTimerId(): string {
  return `${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
}
