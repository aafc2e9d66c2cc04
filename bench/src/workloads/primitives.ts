import { randomBytes } from 'node:crypto';
import { connectNats, createNatsBackend, deleteNatsBackendData } from '@duetime/backend-nats';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { type Row, soloRow } from '../lib/report.js';
import { alternate, type BenchContext } from '../lib/run.js';
import { NATS_CLUSTER_URLS, NATS_NEW_URL, uniqueName } from '../subjects/types.js';

const HOUR = 3_600_000;
const BODY = new TextEncoder().encode(
  JSON.stringify({ type: 'bench', aggregateId: 'x', data: 'p'.repeat(64) }),
);

/** One write the NATS store could be built from, or the store's own one-schedule transaction. */
interface Primitive {
  name: string;
  /** Opens it on `servers`; `one(i)` does the write `i`, awaited. */
  open(
    servers: string[],
    replicas: number,
  ): Promise<{ one(i: number): Promise<void>; close(): Promise<void> }>;
}

/** A stream of its own for the raw primitives, with what the store's streams allow. */
async function rawStream(nc: NatsConnection, replicas: number) {
  const jsm = await jetstreamManager(nc);
  const name = uniqueName('BENCHPRIM_').toUpperCase();
  const prefix = name.toLowerCase();
  await jsm.streams.add({
    name,
    subjects: [`${prefix}.>`],
    storage: StorageType.File,
    num_replicas: replicas,
    allow_direct: true,
    ...({
      allow_atomic: true,
      allow_msg_schedules: true,
      allow_rollup_hdrs: true,
      allow_msg_ttl: true,
    } as object),
  });
  return { js: jetstream(nc), prefix, drop: () => jsm.streams.delete(name) };
}

function raw(
  name: string,
  write: (
    ctx: { nc: NatsConnection; js: ReturnType<typeof jetstream>; prefix: string },
    i: number,
  ) => Promise<unknown>,
): Primitive {
  return {
    name,
    async open(servers, replicas) {
      const nc = await connectNats(servers);
      const { js, prefix, drop } = await rawStream(nc, replicas);
      return {
        one: async (i) => void (await write({ nc, js, prefix }, i)),
        async close() {
          await drop();
          await nc.close();
        },
      };
    },
  };
}

const PUBLISH = raw('publish (awaited ack)', ({ js, prefix }, i) => js.publish(`${prefix}.p.${i}`, BODY));

const CAS = raw('compare-and-set publish (expected last subject sequence)', ({ js, prefix }, i) =>
  js.publish(`${prefix}.k.${i}`, BODY, { expect: { lastSubjectSequence: 0 } }),
);

const SCHEDULED = raw('message schedule (Nats-Schedule @at, with compare-and-set)', ({ js, prefix }, i) => {
  const h = natsHeaders();
  h.set('Nats-Schedule', `@at ${new Date(Date.now() + HOUR).toISOString()}`);
  h.set('Nats-Schedule-Target', `${prefix}.fire.${i}`);
  return js.publish(`${prefix}.s.${i}`, BODY, { headers: h, expect: { lastSubjectSequence: 0 } });
});

/**
 * Three messages stored together or not at all: a one-schedule transaction's commit marker (its message
 * id, kept for the duplicate window), its record and its timer.
 */
const BATCH = raw('atomic batch of 3 messages', async ({ nc, prefix }, i) => {
  const id = randomBytes(12).toString('base64url');
  const part = (sequence: number) => {
    const h = natsHeaders();
    h.set('Nats-Batch-Id', id);
    h.set('Nats-Batch-Sequence', String(sequence));
    return h;
  };
  const marker = part(1);
  marker.set('Nats-Msg-Id', id);
  marker.set('Nats-TTL', '130s');
  nc.publish(`${prefix}.m`, '', { headers: marker });
  nc.publish(`${prefix}.b.${i}`, BODY, { headers: part(2) });
  const commit = part(3);
  commit.set('Nats-Batch-Commit', '1');
  const reply = await nc.request(`${prefix}.d.${i}`, BODY, { headers: commit, timeout: 10_000 });
  const ack = JSON.parse(new TextDecoder().decode(reply.data)) as { error?: { description: string } };
  if (ack.error) throw new Error(`atomic batch refused: ${ack.error.description}`);
});

const DUETIME: Primitive = {
  name: 'duetime/nats, store.transact with one tx.schedule',
  async open(servers, replicas) {
    const prefix = uniqueName('bprim_');
    const backend = await createNatsBackend({ servers }, { prefix, ...(replicas > 1 ? { replicas } : {}) });
    return {
      one: (i) =>
        backend.store.transact((tx) =>
          tx.schedule(`bench/${i}`, new Date(Date.now() + HOUR), { type: 'bench', aggregateId: `${i}` }),
        ),
      async close() {
        await backend.close();
        const nc = await connectNats(servers);
        await deleteNatsBackendData(nc, prefix);
        await nc.close();
      },
    };
  },
};

const PRIMITIVES = [PUBLISH, CAS, SCHEDULED, BATCH, DUETIME];

async function rate(p: Primitive, servers: string[], replicas: number, count: number): Promise<number> {
  const opened = await p.open(servers, replicas);
  try {
    for (let i = 0; i < 20; i++) await opened.one(-1 - i);
    const started = performance.now();
    for (let i = 0; i < count; i++) await opened.one(i);
    return Math.round(count / ((performance.now() - started) / 1000));
  } finally {
    await opened.close();
  }
}

/**
 * primitives: the floor under the NATS store's awaited enqueue. Each JetStream write the store could be
 * built from, awaited one after another on a file-backed NATS 2.15 server and on the R3 cluster: a plain
 * publish, a compare-and-set publish, a message schedule, an atomic batch of three messages (what a
 * transaction's commit is: the commit marker, the record and its timer); and duetime's own one-schedule
 * transaction on the same server, with its ratio to the atomic batch and to the compare-and-set publish.
 */
export async function primitivesWorkload(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 200 : 2000;
  const rows: Row[] = [];
  const targets = [
    { label: 'single server', servers: [NATS_NEW_URL], replicas: 1 },
    { label: 'R3 cluster', servers: NATS_CLUSTER_URLS, replicas: 3 },
  ];
  for (const target of targets) {
    const label = `${count.toLocaleString('en-US')} awaited writes, ${target.label}`;
    const samples = await alternate(
      ctx,
      PRIMITIVES,
      label,
      (p) => rate(p, target.servers, target.replicas, count),
      Number.NaN,
      { rotate: true },
    );
    for (const p of PRIMITIVES)
      rows.push(
        soloRow('primitives', `${label}: ${p.name}`, 'writes/s', 'higher', p.name, samples.get(p.name)!),
      );
    const own = samples.get(DUETIME.name)!;
    for (const floor of [BATCH, CAS]) {
      const theirs = samples.get(floor.name)!;
      rows.push(
        soloRow(
          'primitives',
          `${label}: duetime ÷ ${floor.name}`,
          'ratio',
          'higher',
          DUETIME.name,
          own.map((v, i) => v / (theirs[i] ?? Number.NaN)),
        ),
      );
    }
  }
  return rows;
}
