import { freshNamespace } from '@duetime/conformance';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { NATS_STORE_URL } from './adapter.js';

// What the store relies on, checked against the real server (NATS >= 2.12): each test is one finding
// that docs/design.md ("What JetStream guarantees, as tested") cites. If a server release changes one of
// these, this file says which.

describe('JetStream primitives the store stands on', () => {
  let nc: NatsConnection;
  let io: NatsIo;
  const stream = `P${freshNamespace()}`;
  const s = (name: string) => `${stream}.${name}`;

  beforeAll(async () => {
    nc = await connectNats(NATS_STORE_URL);
    io = await NatsIo.open(nc, 5000);
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({
      name: stream,
      subjects: [`${stream}.>`],
      allow_atomic: true,
      allow_direct: true,
      allow_rollup_hdrs: true,
      allow_msg_ttl: true,
      duplicate_window: 120_000_000_000,
    });
  });
  afterAll(async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(stream).catch(() => {});
    await nc.close();
  });

  const at = (subject: string) => io.last(stream, subject);

  it('stores an atomic batch with contiguous sequences, its last one acknowledged', async () => {
    const result = await io.atomicPublish([
      { subject: s('a.1'), data: '1' },
      { subject: s('a.2'), data: '2' },
      { subject: s('a.3'), data: '3' },
    ]);
    expect(result).toMatchObject({ kind: 'stored', count: 3 });
    const last = (result as { lastSeq: number }).lastSeq;
    expect((await at(s('a.1')))?.seq).toBe(last - 2);
    expect((await at(s('a.2')))?.seq).toBe(last - 1);
    expect((await at(s('a.3')))?.seq).toBe(last);
  });

  it('honours Nats-Expected-Last-Subject-Sequence on any message of a batch, and refuses the whole batch when one fails', async () => {
    const first = await io.atomicPublish([{ subject: s('b.x'), data: 'x1' }]);
    const xSeq = (first as { lastSeq: number }).lastSeq;
    // Right expectation on the second message, wrong one on the third: nothing is stored.
    const refused = await io.atomicPublish([
      { subject: s('b.y'), data: 'y1' },
      { subject: s('b.x'), data: 'x2', headers: { 'Nats-Expected-Last-Subject-Sequence': String(xSeq) } },
      { subject: s('b.z'), data: 'z1', headers: { 'Nats-Expected-Last-Subject-Sequence': '999999' } },
    ]);
    expect(refused.kind).toBe('conflict');
    expect(await at(s('b.y'))).toBeUndefined();
    expect((await at(s('b.x')))?.seq).toBe(xSeq);
    // 0 means "no message on the subject".
    expect(
      (
        await io.atomicPublish([
          { subject: s('b.new'), data: 'n', headers: { 'Nats-Expected-Last-Subject-Sequence': '0' } },
        ])
      ).kind,
    ).toBe('stored');
    expect(
      (
        await io.atomicPublish([
          { subject: s('b.new'), data: 'n', headers: { 'Nats-Expected-Last-Subject-Sequence': '0' } },
        ])
      ).kind,
    ).toBe('conflict');
  });

  it('refuses a batch that rolls one subject up twice (so a commit writes each subject once)', async () => {
    await expect(
      io.atomicPublish([
        { subject: s('c.k'), data: '1', headers: { 'Nats-Rollup': 'sub' } },
        { subject: s('c.k'), data: '2', headers: { 'Nats-Rollup': 'sub' } },
      ]),
    ).rejects.toThrow(/batch rollup sub invalid/);
    expect(await at(s('c.k'))).toBeUndefined();
  });

  it('refuses a resent batch as a duplicate by the message id of its first message, before any expectation', async () => {
    const id = `tx-${freshNamespace()}`;
    const batch = [
      {
        subject: s('d.e'),
        data: 'e',
        headers: { 'Nats-Msg-Id': id, 'Nats-Expected-Last-Subject-Sequence': '0' },
      },
      { subject: s('d.f'), data: 'f' },
    ];
    expect((await io.atomicPublish(batch)).kind).toBe('stored');
    // Its expectation no longer holds, yet the answer is "duplicate": the resend of a batch that landed.
    expect((await io.atomicPublish(batch)).kind).toBe('duplicate');
  });

  it('stores nothing of a batch whose commit never came', async () => {
    const h = headers();
    h.set('Nats-Batch-Id', `open-${freshNamespace()}`);
    h.set('Nats-Batch-Sequence', '1');
    nc.publish(s('g.never'), 'x', { headers: h });
    await nc.flush();
    // A later, complete batch is unaffected, and the open one is invisible.
    expect((await io.atomicPublish([{ subject: s('g.other'), data: 'y' }])).kind).toBe('stored');
    expect(await at(s('g.never'))).toBeUndefined();
  });

  it('keeps one message per subject under Nats-Rollup: sub, and removes one with Nats-TTL after its time', async () => {
    const js = jetstream(nc);
    for (const v of ['1', '2', '3']) {
      const h = headers();
      h.set('Nats-Rollup', 'sub');
      await js.publish(s('r.k'), v, { headers: h });
    }
    expect((await io.subjects(stream, s('r.*'))).get(s('r.k'))).toBe(1);
    expect(new TextDecoder().decode((await at(s('r.k')))?.data)).toBe('3');
    const tombstone = await io.atomicPublish([
      { subject: s('r.k'), data: '', headers: { 'Nats-Rollup': 'sub', 'Nats-TTL': '1s' } },
    ]);
    expect(tombstone.kind).toBe('stored');
    const deadline = Date.now() + 10_000;
    while ((await at(s('r.k'))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(await at(s('r.k'))).toBeUndefined();
  });

  it('reads a subject filter in stream order a page at a time (batch direct get), and many subjects at once (multi_last)', async () => {
    for (let i = 0; i < 5; i++)
      await io.atomicPublish([
        { subject: s('q.1'), data: String(i) },
        { subject: s(`m.${i}`), data: String(i) },
      ]);
    const page = await io.range(stream, s('q.1'), 1, 3);
    expect(page.messages.map((m) => new TextDecoder().decode(m.data))).toEqual(['0', '1', '2']);
    expect(page.pending).toBe(2);
    const rest = await io.range(stream, s('q.1'), page.messages[2]!.seq + 1, 3);
    expect(rest.messages.map((m) => new TextDecoder().decode(m.data))).toEqual(['3', '4']);
    expect(rest.pending).toBe(0);
    const many = await io.lastOf(stream, [s('m.0'), s('m.3'), s('m.none')]);
    expect([...many.keys()].sort()).toEqual([s('m.0'), s('m.3')]);
    expect((await io.subjects(stream, s('q.*'))).get(s('q.1'))).toBe(5);
  });

  it('purges a subject below a sequence, keeping what was written after it', async () => {
    const first = await io.atomicPublish([{ subject: s('p.1'), data: 'old' }]);
    const bound = (first as { lastSeq: number }).lastSeq + 1;
    await io.atomicPublish([{ subject: s('p.1'), data: 'new' }]);
    await io.purge(stream, { filter: s('p.1'), before: bound });
    const left = await io.range(stream, s('p.1'), 1, 10);
    expect(left.messages.map((m) => new TextDecoder().decode(m.data))).toEqual(['new']);
  });
});
