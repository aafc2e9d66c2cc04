import { type Clock, LeaseManager, type Logger } from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { NatsIo } from '../io.js';
import { type LeaseLayout, NatsLeases } from '../leases.js';
import { ServerClock } from '../server-clock.js';
import type { SubjectLayout } from './subjects.js';

/** The lease key (one lease per stream: the subject is fixed, see {@link SubjectLayout.lease}). */
export const PUMP_LEASE_KEY = 'pump';

export interface PumpLeaseOptions {
  connection: NatsConnection;
  stream: string;
  layout: SubjectLayout;
  owner: string;
  ttlMs: number;
  clock: Clock;
  logger: Logger;
}

/** The pump's lease and what it runs on: close `io` once the lease is released. */
export interface PumpLease {
  lease: LeaseManager;
  io: NatsIo;
}

/**
 * The lease that elects the process running the emulated pump: the package's {@link NatsLeases} (the same
 * leases the backend gives a calendar `Scheduler`) on the scheduler's own stream and connection, held by
 * core's {@link LeaseManager}.
 *
 * - The lease is the last message on `<prefix>.sched.lease`; every write is compare-and-set on that
 *   subject's last sequence (`Nats-Expected-Last-Subject-Sequence`) and rolls the subject up, so one
 *   message stays. Its fencing token is the sequence of the write that acquired it.
 * - Expiry is judged by the server's clock: a lease lives until the server timestamp of its last write plus
 *   `ttl`, measured against a lower bound of the server's time ({@link ServerClock}, probing on
 *   `<prefix>.sched.clock`), so no host's wall clock matters and nobody takes it over early.
 * - The holder renews every `ttl / 3` and acts only while its holding is valid on its own monotonic clock:
 *   until the request that granted or renewed it was sent, plus `0.9 × ttl`; a reply that comes late never
 *   restores a holding that ended. So the holder stops before the server lets anyone else in.
 * - A released lease (`close()`) is removed from the stream, and the next candidate takes it at once.
 */
export async function openPumpLease(options: PumpLeaseOptions): Promise<PumpLease> {
  const { layout } = options;
  // A request waits at most a third of the lease (at least a second, at most five): a renewal that gets
  // no answer fails in time for the next attempt while the holding is still valid.
  const timeoutMs = Math.max(1_000, Math.min(5_000, Math.floor(options.ttlMs / 3)));
  const io = await NatsIo.open(options.connection, timeoutMs);
  const where: LeaseLayout = {
    leaseStream: options.stream,
    lease: () => layout.lease,
    clock: layout.clock,
    rollup: true,
  };
  const lease = new LeaseManager({
    leases: new NatsLeases(io, where, new ServerClock(io, where)),
    key: PUMP_LEASE_KEY,
    ttl: options.ttlMs,
    owner: options.owner,
    clock: options.clock,
    logger: options.logger,
  });
  return { lease, io };
}
