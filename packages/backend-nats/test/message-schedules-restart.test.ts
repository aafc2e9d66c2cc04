import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { distribution, FireLog, oneShot, scheduleStream } from './schedules.js';

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
});
