import { waitFor } from '@duetime/conformance';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { claimConsumer, distribution, FireLog, fetchClaims, oneShot, scheduleStream } from './schedules.js';

// JetStream message schedules across a crash of the server (SIGKILL, then a start on the same store), on a
// NATS 2.15 server of the test's own: the shared one cannot be stopped. See docs/nats-message-schedules.md.

describe('JetStream message schedules across a server crash and restart', () => {
  let server: PrivateNatsServer | undefined;
  let nc: NatsConnection | undefined;
  let fires: FireLog | undefined;
  afterEach(async () => {
    await fires?.stop();
    await nc?.close();
    await server?.dispose();
    fires = undefined;
    nc = undefined;
    server = undefined;
  });

  it('(e) keeps pending schedules: those due while the server was down fire at once after the restart, the others at their instant; each once', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    nc = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    const io = await NatsIo.open(nc, 5000);
    const stream = 'RESTART';
    await scheduleStream(await jetstreamManager(nc), stream);
    const log = await FireLog.start(nc, stream, `${stream}.fire.>`);
    fires = log;

    const now = Date.now();
    const due = new Map<string, number>();
    const batch = (name: string, count: number, from: number, spreadMs: number) =>
      Array.from({ length: count }, (_, i) => {
        const subject = `${stream}.sched.${name}.${i}`;
        const at = from + Math.floor((i * spreadMs) / count);
        due.set(subject, at);
        return { subject, data: `${name}.${i}`, headers: oneShot(at, `${stream}.fire.${name}.${i}`) };
      });
    // Due while the server is down (it is killed before the first of them), and due well after it is back.
    const during = batch('during', 50, now + 1500, 1000);
    const after = batch('after', 50, now + 12_000, 1000);
    expect((await io.atomicPublish([...during, ...after])).kind).toBe('stored');

    await server.kill();
    const killedAt = Date.now();
    // Down until a second after the last of `during` was due.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, now + 3500 - Date.now())));
    const restartedAt = Date.now();
    await server.restart();
    const upAt = Date.now();

    await log.waitForAll([...due.keys()], 60_000);
    for (const [subject, at] of due) {
      expect(log.of(subject), subject).toHaveLength(1);
      expect(log.of(subject)[0]!.storedMs, subject).toBeGreaterThanOrEqual(at);
    }
    // Those due while the server was down (all of them, unless this machine was slow to kill it) fired
    // after the restart.
    const overdueOnes = during.filter(({ subject }) => due.get(subject)! > killedAt);
    expect(overdueOnes.length).toBeGreaterThan(0);
    for (const { subject } of overdueOnes)
      expect(log.of(subject)[0]!.storedMs).toBeGreaterThanOrEqual(restartedAt);
    const overdue = overdueOnes.map(({ subject }) => log.of(subject)[0]!.storedMs - upAt);
    const late = after.map(({ subject }) => log.of(subject)[0]!.storedMs - due.get(subject)!);
    console.log(
      `after a restart (down ${restartedAt - killedAt} ms, the last overdue schedule due ${restartedAt - now - 2500} ms before the restart; the server took ${upAt - restartedAt} ms to answer): ` +
        `the ${overdue.length} schedules due during the outage fired ${distribution(overdue).text} after the server answered; ` +
        `those due after it fired ${distribution(late).text} after their instant`,
    );
  }, 120_000);

  it('(e) keeps the claims of a consumer across a crash: unacknowledged fires come again; an acknowledgement made just before the crash may not have been kept', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    nc = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    const io = await NatsIo.open(nc, 5000);
    const stream = 'CLAIMS';
    await scheduleStream(await jetstreamManager(nc), stream);
    const consumer = await claimConsumer(nc, stream, `${stream}.fire.>`, 'claims', 2000);
    const names = ['acked-early', 'acked-late', 'held-1', 'held-2'];
    for (const name of names)
      await io.publish(`${stream}.sched.${name}`, name, {
        headers: oneShot(Date.now() + 200, `${stream}.fire.${name}`),
      });
    const first = await fetchClaims(consumer, names.length);
    expect(first.map((m) => m.string()).sort()).toEqual(names);
    const byName = (name: string) => first.find((m) => m.string() === name);
    expect(await byName('acked-early')?.ackAck()).toBe(true);
    // The server writes a consumer's acknowledgements to its store shortly after it confirms them.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(await byName('acked-late')?.ackAck()).toBe(true);
    await server.kill();
    await server.restart(500);

    // Everything delivered again comes once ack_wait lapsed; read for two more ack_waits.
    const again = new Map<string, number>();
    const settled = Date.now() + 6000;
    const hardDeadline = Date.now() + 60_000;
    const heldBack = () => again.has('held-1') && again.has('held-2');
    while ((Date.now() < settled || !heldBack()) && Date.now() < hardDeadline)
      try {
        for await (const m of await consumer.fetch({ max_messages: 4, expires: 1000 })) {
          again.set(m.string(), m.info.deliveryCount);
          m.ack();
        }
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    // Unacknowledged claims come again, and their delivery count survived the crash.
    expect(again.get('held-1')).toBe(2);
    expect(again.get('held-2')).toBe(2);
    // An acknowledgement kept for 1.5 s holds.
    expect(again.has('acked-early')).toBe(false);
    // One the server confirmed right before it was killed is delivered again in some runs (here: 5 of 11,
    // with the kill within 20 ms of the confirmation; never with 100 ms or more between them): the server
    // had not written it yet. A confirmed acknowledgement is no durable consumption.
    console.log(
      `after a crash, the fire acknowledged (and confirmed) right before it was ${again.has('acked-late') ? 'delivered again' : 'not delivered again'}`,
    );
    expect([undefined, 2]).toContain(again.get('acked-late'));
  }, 120_000);

  it('(e) fires every schedule at least once when the server is killed while it fires; a fire may come twice', async () => {
    server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
    nc = await connectNats(server.url, { reconnectTimeWaitMs: 100 });
    const io = await NatsIo.open(nc, 10_000);
    const stream = 'MIDFIRE';
    await scheduleStream(await jetstreamManager(nc), stream);
    const log = await FireLog.start(nc, stream, `${stream}.fire.>`);
    fires = log;
    const at = Date.now() + 2000;
    const subjects: string[] = [];
    for (let b = 0; b < 3000; b += 1000)
      await io.atomicPublish(
        Array.from({ length: 1000 }, (_, j) => {
          subjects.push(`${stream}.sched.${b + j}`);
          return {
            subject: `${stream}.sched.${b + j}`,
            data: String(b + j),
            headers: oneShot(at, `${stream}.fire.${b + j}`),
          };
        }),
      );
    // Killed 10 ms after the instant: in the middle of the pass that fires all 3,000 (or just before it).
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, at + 10 - Date.now())));
    await server.kill();
    await server.restart(300);
    await log.waitForAll(subjects, 60_000);
    // A fire message per schedule in the stream, counted by the server: duplicates are distinct messages
    // (a redelivery of an acknowledgement the crash lost would be the same message again).
    let firedMessages = 0;
    for (const n of (await io.subjects(stream, `${stream}.fire.>`)).values()) firedMessages += n;
    await waitFor(
      'every fire message received',
      () => new Set(log.fired.map((f) => f.seq)).size >= firedMessages,
      {
        timeoutMs: 30_000,
      },
    );
    const bySchedule = new Map<string, Set<number>>();
    for (const f of log.fired) {
      const seqs = bySchedule.get(f.headers['Nats-Scheduler'] ?? '') ?? new Set<number>();
      seqs.add(f.seq);
      bySchedule.set(f.headers['Nats-Scheduler'] ?? '', seqs);
    }
    for (const subject of subjects)
      expect(bySchedule.get(subject)?.size ?? 0, subject).toBeGreaterThanOrEqual(1);
    const twice = [...bySchedule.values()].filter((seqs) => seqs.size > 1).length;
    expect(firedMessages).toBe(3000 + twice);
    // Observed: in 5 of 15 runs (killed 2 to 40 ms after the instant) one schedule of the 3,000 fired twice
    // (its fire stored, its schedule not yet removed when the server died); never more than one. A
    // consumer must recognise a repeated fire (by the version it carries).
    console.log(
      `killed while firing 3,000 schedules: each fired, ${twice} fired twice (${firedMessages} fire messages)`,
    );
  }, 120_000);
});
