import { freshNamespace, waitFor } from '@duetime/conformance';
import { AckPolicy, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { NATS_STORE_URL } from './adapter.js';
import { distribution, FireLog, oneShot, scheduleStream, toHeaders } from './schedules.js';

// JetStream message schedules (ADR-51) as the store would use them to keep due times, checked against the
// real NATS 2.15 server: each test is one finding of docs/nats-message-schedules.md. Where the server does
// not do what the design hoped, the test asserts what it does and says so. No timing is asserted beyond
// "fired, and not before its instant": the delays are printed (the design note quotes them).
//
// The server restart is in message-schedules-restart.test.ts, the leader change in
// message-schedules-cluster.test.ts.

describe('JetStream message schedules on NATS >= 2.12', () => {
  let nc: NatsConnection;
  let io: NatsIo;
  let fires: FireLog;
  const stream = `S${freshNamespace()}`;
  const sched = (name: string) => `${stream}.sched.${name}`;
  const target = (name: string) => `${stream}.fire.${name}`;

  beforeAll(async () => {
    nc = await connectNats(NATS_STORE_URL);
    io = await NatsIo.open(nc, 5000);
    await scheduleStream(await jetstreamManager(nc), stream);
    fires = await FireLog.start(nc, stream, `${stream}.fire.>`);
  });
  afterAll(async () => {
    await fires?.stop();
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {});
    await nc.close();
  });

  /** Publishes a schedule due at `dueMs` that fires into `target(name)` (or `into`), outside any batch. */
  const publishSchedule = async (
    name: string,
    dueMs: number,
    data: string,
    extra: Record<string, string> = {},
    into = target(name),
  ) => jetstream(nc).publish(sched(name), data, { headers: toHeaders(oneShot(dueMs, into, extra)) });

  /** A schedule due at `dueMs` whose fire proves that the server's scheduler got past that instant. */
  const fence = async (name: string, dueMs: number) => {
    await publishSchedule(name, dueMs, 'fence');
    return fires.waitFor(sched(name));
  };

  it('(a) accepts a schedule inside an atomic batch; a refused batch leaves no schedule behind', async () => {
    const due = Date.now() + 800;
    const stored = await io.atomicPublish([
      { subject: `${stream}.rec.a`, data: 'record' },
      {
        subject: sched('a'),
        data: 'payload-a',
        headers: oneShot(due, target('a'), { 'Duetime-Version': '7' }),
      },
    ]);
    expect(stored).toMatchObject({ kind: 'stored', count: 2 });
    // The same, but a later message's expectation fails: the whole batch, schedule included, is refused.
    const refused = await io.atomicPublish([
      { subject: sched('a-refused'), data: 'never', headers: oneShot(due, target('a-refused')) },
      {
        subject: `${stream}.rec.a`,
        data: 'stale',
        headers: { 'Nats-Expected-Last-Subject-Sequence': '999999' },
      },
    ]);
    expect(refused.kind).toBe('conflict');
    expect(await io.last(stream, sched('a-refused'))).toBeUndefined();

    const fired = await fires.waitFor(sched('a'));
    expect(fired.subject).toBe(target('a'));
    expect(fired.data).toBe('payload-a');
    expect(fired.storedMs).toBeGreaterThanOrEqual(due);
    // The server copies the schedule's headers onto what it fires, the batch's own among them: a fired
    // message carries the Nats-Batch-Id/-Sequence/-Commit of the batch that wrote its schedule (harmless:
    // the fire is a plain publish, not part of a batch, but a consumer must not read those headers as its
    // own batch).
    expect(fired.headers['Duetime-Version']).toBe('7');
    expect(fired.headers['Nats-Batch-Commit']).toBe('1');
    expect(fired.headers['Nats-Batch-Sequence']).toBe('2');
    expect(fired.headers['Nats-Schedule-Next']).toBe('purge');
    // Nothing on the fire names the sequence the schedule was stored at (the server removes that message):
    // a version must travel in a header of the schedule's own.
    expect(
      Object.keys(fired.headers)
        .filter((h) => h.startsWith('Nats-') && !h.startsWith('Nats-Batch-'))
        .sort(),
    ).toEqual(['Nats-Schedule-Next', 'Nats-Scheduler']);
    // A one-shot schedule's message is removed once it fired; the batch's other message stays.
    expect(await io.last(stream, sched('a'))).toBeUndefined();
    expect(await io.last(stream, `${stream}.rec.a`)).toBeDefined();
    // A schedule already due when written fires (on the scheduler's next pass), never before it was stored.
    const written = Date.now();
    await publishSchedule('a-past', written - 60_000, 'past');
    expect((await fires.waitFor(sched('a-past'))).storedMs).toBeGreaterThanOrEqual(written);
    // Nats-Schedule-TTL becomes the fire's Nats-TTL: the server would remove the fire after it, handled
    // or not.
    await publishSchedule('a-ttl', Date.now() + 100, 'ttl', { 'Nats-Schedule-TTL': '5m' });
    expect((await fires.waitFor(sched('a-ttl'))).headers['Nats-TTL']).toBe('5m');
    // The target must be a subject of the same stream.
    await expect(publishSchedule('a-outside', Date.now() + 1000, 'x', {}, 'elsewhere.fire')).rejects.toThrow(
      /message schedules target is invalid/,
    );
    await fence('a-fence', Date.now() + 200);
    expect(fires.of(sched('a-refused'))).toEqual([]);
    expect(fires.of(sched('a'))).toHaveLength(1);
  });

  it('(b) replaces a pending schedule by a write to its subject under expected-last-subject-sequence: the old timer never fires', async () => {
    const now = Date.now();
    const first = await publishSchedule('b', now + 600, 'v1', { 'Duetime-Version': '1' });
    // A replacement that expects a stale sequence is refused (compare-and-set on the schedule's subject).
    const stale = await io.publish(sched('b'), 'v-stale', {
      expectSubjectSeq: first.seq - 1,
      headers: oneShot(now + 600, target('b')),
    });
    expect(stale).toBe('conflict');
    // The right expectation replaces it, later; inside an atomic batch, as a commit would.
    const replaced = await io.atomicPublish([
      {
        subject: sched('b'),
        data: 'v2',
        headers: {
          ...oneShot(now + 1600, target('b'), { 'Duetime-Version': '2' }),
          'Nats-Expected-Last-Subject-Sequence': String(first.seq),
        },
      },
    ]);
    expect(replaced.kind).toBe('stored');
    // No rollup was asked for, yet the subject holds one message: the server removed the replaced schedule
    // message when the new one was stored (a schedule's subject keeps only its latest schedule).
    expect((await io.subjects(stream, sched('b'))).get(sched('b'))).toBe(1);
    expect(new TextDecoder().decode((await io.last(stream, sched('b')))?.data)).toBe('v2');
    // Moving it earlier works the same way.
    const earlier = await publishSchedule('b-earlier', now + 1800, 'late', { 'Duetime-Version': '1' });
    await io.publish(sched('b-earlier'), 'early', {
      expectSubjectSeq: earlier.seq,
      headers: oneShot(now + 700, target('b-earlier'), { 'Duetime-Version': '2' }),
    });

    const fired = await fires.waitFor(sched('b'));
    const moved = await fires.waitFor(sched('b-earlier'));
    await fence('b-fence', Date.now() + 500);
    expect(fires.of(sched('b')).map((f) => f.data)).toEqual(['v2']);
    expect(fired.headers['Duetime-Version']).toBe('2');
    expect(fired.storedMs).toBeGreaterThanOrEqual(now + 1600);
    expect(fires.of(sched('b-earlier')).map((f) => f.data)).toEqual(['early']);
    expect(moved.storedMs).toBeGreaterThanOrEqual(now + 700);
    // The fire removes every message of the schedule's subject, the replaced one included.
    expect(await io.last(stream, sched('b'))).toBeUndefined();
    // The expectation header is not copied onto the fire.
    expect(fired.headers['Nats-Expected-Last-Subject-Sequence']).toBeUndefined();
    // A replacement that comes too late expects the sequence of a schedule that fired (and was removed):
    // it is refused, so a writer learns that the old version fired meanwhile.
    const late = await io.publish(sched('b'), 'v3', {
      expectSubjectSeq: (replaced as { lastSeq: number }).lastSeq,
      headers: oneShot(Date.now() + 60_000, target('b')),
    });
    expect(late).toBe('conflict');
    // What a layout with one message per put needs: once fired, the schedule's subject is empty, so the
    // next put expects 0 and is stored, while the fire keeps the fired version's body and headers on its
    // own subject (the record moved with the fire); the new schedule fires into that subject after it.
    const next = await io.publish(sched('b'), 'v3', {
      expectSubjectSeq: 0,
      headers: oneShot(Date.now() + 300, target('b'), { 'Duetime-Version': '3' }),
    });
    expect(next).toMatchObject({ seq: expect.any(Number) });
    const record = await io.last(stream, target('b'));
    expect(new TextDecoder().decode(record?.data)).toBe('v2');
    expect(record?.header('Duetime-Version')).toBe('2');
    await waitFor('the next version fired', () => fires.of(sched('b')).length === 2);
    expect(fires.of(sched('b')).map((f) => f.data)).toEqual(['v2', 'v3']);
    expect(new TextDecoder().decode((await io.last(stream, target('b')))?.data)).toBe('v3');
  });

  it('(c) cancels a pending schedule by deleting its message, or purging its subject: nothing fires', async () => {
    const jsm = await jetstreamManager(nc);
    const due = Date.now() + 500;
    const deleted = await publishSchedule('c-deleted', due, 'x');
    await publishSchedule('c-purged', due, 'x');
    // A tombstone: a rollup of the subject by a message without schedule headers.
    await publishSchedule('c-rolled', due, 'x');
    await io.publish(sched('c-rolled'), '', { headers: { 'Nats-Rollup': 'sub' } });
    // Any later message without schedule headers cancels it too, even without a rollup.
    await publishSchedule('c-plain', due, 'x');
    await io.publish(sched('c-plain'), 'not a schedule');
    expect(await jsm.streams.deleteMessage(stream, deleted.seq, false)).toBe(true);
    expect(await io.purge(stream, { filter: sched('c-purged') })).toBe(1);

    await fence('c-fence', due + 500);
    expect(fires.of(sched('c-deleted'))).toEqual([]);
    expect(fires.of(sched('c-purged'))).toEqual([]);
    expect(fires.of(sched('c-rolled'))).toEqual([]);
    expect(fires.of(sched('c-plain'))).toEqual([]);
    // The rollup's message stays (it is no schedule): a cancel by rollup leaves a message to reclaim.
    expect((await io.last(stream, sched('c-rolled')))?.data.length).toBe(0);
    // Without a rollup, the cancelled schedule's message stays as well, beside the one that cancelled it.
    expect((await io.subjects(stream, sched('c-plain'))).get(sched('c-plain'))).toBe(2);
  });

  it('(d) fires 200 schedules into a subject a durable pull consumer reads: each once, none early', async () => {
    const count = 200;
    const start = Date.now() + 1000;
    const due = new Map<string, number>();
    // Spread over 4 s, written 50 to an atomic batch (as commits would write them).
    for (let b = 0; b < count; b += 50) {
      const batch = Array.from({ length: 50 }, (_, j) => {
        const i = b + j;
        const at = start + Math.floor((i * 4000) / count) + (i % 7);
        due.set(sched(`d.${i}`), at);
        return {
          subject: sched(`d.${i}`),
          data: String(i),
          headers: oneShot(at, target(`d.${i}`), {
            'Duetime-Key': `d/${i}`,
            'Duetime-Version': String(i + 1),
          }),
        };
      });
      expect((await io.atomicPublish(batch)).kind).toBe('stored');
    }
    await fires.waitForAll([...due.keys()]);
    const stored: number[] = [];
    const received: number[] = [];
    for (const [subject, at] of due) {
      const got = fires.of(subject);
      expect(got, subject).toHaveLength(1);
      const f = got[0]!;
      const i = subject.slice(subject.lastIndexOf('.') + 1);
      // What identifies the schedule on the fire: the server's Nats-Scheduler (its subject), and every
      // header the schedule carried (here its key and version).
      expect(f.subject).toBe(target(`d.${i}`));
      expect(f.headers['Duetime-Key']).toBe(`d/${i}`);
      expect(f.headers['Duetime-Version']).toBe(String(Number(i) + 1));
      // Never before its instant (the server's clock is this machine's).
      expect(f.storedMs, subject).toBeGreaterThanOrEqual(at);
      stored.push(f.storedMs - at);
      received.push(f.receivedMs - at);
    }
    console.log(
      `fire delay of ${count} schedules over 4 s — stored − due: ${distribution(stored).text}; received by the consumer − due: ${distribution(received).text}`,
    );
  });

  it('(d) fires a burst of 200 schedules due at one instant: each once, none early', async () => {
    const at = Date.now() + 1000;
    const subjects = Array.from({ length: 200 }, (_, i) => sched(`burst.${i}`));
    for (let b = 0; b < subjects.length; b += 100)
      await io.atomicPublish(
        subjects.slice(b, b + 100).map((subject, j) => ({
          subject,
          data: String(b + j),
          headers: oneShot(at, target(`burst.${b + j}`)),
        })),
      );
    await fires.waitForAll(subjects);
    const stored: number[] = [];
    const received: number[] = [];
    for (const subject of subjects) {
      const got = fires.of(subject);
      expect(got, subject).toHaveLength(1);
      expect(got[0]!.storedMs, subject).toBeGreaterThanOrEqual(at);
      stored.push(got[0]!.storedMs - at);
      received.push(got[0]!.receivedMs - at);
    }
    console.log(
      `fire delay of a burst of ${subjects.length} schedules at one instant — stored − due: ${distribution(stored).text}; received − due: ${distribution(received).text}`,
    );
  });

  it('(d) fires schedules that follow one another closely on passes 250 ms apart (printed), none early', async () => {
    const t0 = Date.now() + 1000;
    const offsets = [0, 10, 50, 100, 300, 600, 601, 1000, 1400];
    for (const [i, offset] of offsets.entries())
      await publishSchedule(`pass.${i}`, t0 + offset, String(offset));
    await fires.waitForAll(offsets.map((_, i) => sched(`pass.${i}`)));
    const seen = offsets.map((offset, i) => {
      const f = fires.of(sched(`pass.${i}`));
      expect(f).toHaveLength(1);
      expect(f[0]!.storedMs).toBeGreaterThanOrEqual(t0 + offset);
      return `+${offset} → +${(f[0]!.storedMs - t0).toFixed(0)}`;
    });
    // Seen: the first at its instant, then the others on passes 250 ms apart (+251, +502, +753, +1004, …).
    console.log(`due → fired (ms after the first instant): ${seen.join(', ')}`);
  });

  it('(g) holds a fire as a claim of a durable consumer: unacknowledged, it is delivered again after ack_wait; kept in progress, it is not', async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.consumers.add(stream, {
      durable_name: 'claims',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 3_000_000_000,
      filter_subject: `${stream}.fire.g.>`,
    });
    const consumer = await jetstream(nc).consumers.get(stream, 'claims');
    const due = Date.now() + 300;
    await publishSchedule('g.held', due, 'held', {}, target('g.held'));
    await publishSchedule('g.dropped', due, 'dropped', {}, target('g.dropped'));
    const first = new Map<string, JsMsg>();
    await waitFor(
      'both fires delivered',
      async () => {
        for await (const m of await consumer.fetch({ max_messages: 2, expires: 1000 }))
          first.set(m.subject, m);
        return first.size === 2;
      },
      { timeoutMs: 30_000 },
    );
    const held = first.get(target('g.held'));
    expect(held?.info.deliveryCount).toBe(1);
    // The holder keeps its claim alive (as a delivery renews); the other holder is gone (a crash).
    const renewing = setInterval(() => held?.working(), 500);
    try {
      const again = await waitFor(
        'the dropped fire delivered again',
        async () => {
          for await (const m of await consumer.fetch({ max_messages: 2, expires: 1000 })) return m;
          return undefined;
        },
        { timeoutMs: 30_000 },
      );
      expect(again.subject).toBe(target('g.dropped'));
      expect(again.info.deliveryCount).toBe(2);
      expect(again.info.redelivered).toBe(true);
      await again.ackAck();
    } finally {
      clearInterval(renewing);
    }
    expect(await held?.ackAck()).toBe(true);
    const info = await jsm.consumers.info(stream, 'claims');
    expect(info.num_ack_pending).toBe(0);
    expect(info.num_redelivered).toBe(0);
  });
  it("(h) lists a stream's subjects sorted, a page by position only (STREAM.INFO subjects_filter, offset)", async () => {
    // What the status page would page through in key order: every key's record subject.
    const list = `${stream}.list`;
    const js = jetstream(nc);
    const keys = Array.from({ length: 300 }, (_, i) => `k${(i * 7) % 300}`);
    await Promise.all(keys.map((k) => js.publish(`${list}.${k}`, 'x')));
    const page = async (offset: number) => {
      const reply = await nc.request(
        `$JS.API.STREAM.INFO.${stream}`,
        JSON.stringify({ subjects_filter: `${list}.>`, offset }),
        { timeout: 10_000 },
      );
      const info = JSON.parse(new TextDecoder().decode(reply.data)) as {
        total: number;
        offset: number;
        limit: number;
        state: { subjects?: Record<string, number> };
      };
      return { ...info, subjects: Object.keys(info.state.subjects ?? {}) };
    };
    const first = await page(0);
    expect(first.total).toBe(300);
    expect(first.subjects).toHaveLength(300);
    // Sorted by subject, whatever the order they were written in.
    expect(first.subjects).toEqual([...first.subjects].sort());
    // Pages are fixed at the server's limit and addressed by position: there is no "after this subject".
    expect(first.limit).toBe(100_000);
    const tail = await page(295);
    expect(tail.subjects).toEqual(first.subjects.slice(295));
  });
  it("(i) caps the claims in flight at the consumer's max_ack_pending: the rest wait until one is acknowledged", async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.consumers.add(stream, {
      durable_name: 'capped',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 30_000_000_000,
      max_ack_pending: 3,
      filter_subject: `${stream}.fire.i.>`,
    });
    const consumer = await jetstream(nc).consumers.get(stream, 'capped');
    const due = Date.now() + 200;
    for (let i = 0; i < 5; i++) await publishSchedule(`i.${i}`, due, `i${i}`, {}, target(`i.${i}`));
    await fence('i-fence', due + 300);
    const held: JsMsg[] = [];
    for await (const m of await consumer.fetch({ max_messages: 5, expires: 1000 })) held.push(m);
    // Five fired, three handed out: the consumer holds no more claims than max_ack_pending.
    expect(held).toHaveLength(3);
    expect((await jsm.consumers.info(stream, 'capped')).num_ack_pending).toBe(3);
    const none: JsMsg[] = [];
    for await (const m of await consumer.fetch({ max_messages: 5, expires: 1000 })) none.push(m);
    expect(none).toHaveLength(0);
    // One settled: one more is handed out.
    await held[0]!.ackAck();
    const next: JsMsg[] = [];
    for await (const m of await consumer.fetch({ max_messages: 5, expires: 1000 })) next.push(m);
    expect(next).toHaveLength(1);
    for (const m of [...held.slice(1), ...next]) await m.ackAck();
  });

  it('(j) turns message schedules on for an existing stream: its records stay, and schedules fire from then on', async () => {
    const jsm = await jetstreamManager(nc);
    const name = `J${freshNamespace()}`;
    await jsm.streams.add({ name, subjects: [`${name}.>`], allow_direct: true });
    try {
      await jetstream(nc).publish(`${name}.rec.old`, 'kept');
      const before = await jsm.streams.info(name);
      expect(before.config.allow_msg_schedules ?? false).toBe(false);
      const updated = await jsm.streams.update(name, { ...before.config, allow_msg_schedules: true });
      // The server echoes what it stored: the change took.
      expect(updated.config.allow_msg_schedules).toBe(true);
      expect(updated.state.messages).toBe(1);
      const due = Date.now() + 300;
      await jetstream(nc).publish(`${name}.sched.j`, 'fired', {
        headers: toHeaders(oneShot(due, `${name}.fire.j`)),
      });
      const fired = await waitFor(
        'the schedule written after the change to fire',
        () => io.last(name, `${name}.fire.j`),
        { timeoutMs: 15_000 },
      );
      expect(new TextDecoder().decode(fired.data)).toBe('fired');
      expect(await io.last(name, `${name}.rec.old`)).toBeDefined();
      // Off again is refused: once on, schedules stay on (the stream keeps firing what it holds).
      const again = await jsm.streams.info(name);
      await expect(
        jsm.streams.update(name, { ...again.config, allow_msg_schedules: false }),
      ).rejects.toThrow();
    } finally {
      await jsm.streams.delete(name);
    }
  });
});
