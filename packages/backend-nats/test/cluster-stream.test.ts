import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { untilServed } from './schedules.js';

// The three-node NATS cluster `bash scripts/services.sh up --clusters` starts (JetStream on every node). This
// file checks the cluster itself with the JetStream client alone (no duetime code): a meta leader answers the
// JetStream API and a stream with three replicas is created, placed on all three servers, and replicates.
// Like the newer single server, the cluster needs the >= 2.12 binary; where the services script recorded
// that it cannot be had, the file reports itself as not run with that reason.

const CLUSTER_URLS = (
  process.env.DUETIME_NATS_CLUSTER_URLS ?? 'nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233'
)
  .split(',')
  .map((url) => url.trim())
  .filter((url) => url !== '');

function recordedStatus(): string | undefined {
  const cache =
    process.env.DUETIME_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'duetime');
  try {
    return readFileSync(join(cache, 'nats-cluster.status'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

const status = recordedStatus();
const unavailable = status?.startsWith('unavailable ') ? status.slice('unavailable '.length) : undefined;
if (unavailable) console.log(`NATS cluster tests not run: ${unavailable}`);

async function connectTo(servers: string[]): Promise<NatsConnection> {
  try {
    return await connect({ servers, timeout: 3000, maxReconnectAttempts: 0, name: 'duetime-cluster-test' });
  } catch (error) {
    throw new Error(
      `the NATS cluster does not answer at ${servers.join(',')} (${error instanceof Error ? error.message : String(error)}); ` +
        "start it with 'bash scripts/services.sh up --clusters' or set DUETIME_NATS_CLUSTER_URLS",
    );
  }
}

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last error: ${String(last)})`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('the NATS cluster (scripts/services.sh up --clusters)', () => {
  // Needed, not optional: fail with why, and how to provide it.

  beforeAll(() => {
    if (unavailable !== undefined)
      throw new Error(`${unavailable}; start it with 'bash scripts/services.sh up --clusters'`);
  });
  const opened: NatsConnection[] = [];
  const streams: string[] = [];
  afterAll(async () => {
    const nc = opened[0];
    if (nc) {
      const jsm = await jetstreamManager(nc);
      for (const name of streams) await jsm.streams.delete(name).catch(() => {});
    }
    await Promise.allSettled(opened.map((c) => c.close()));
  });

  it('has one server per URL, each a different member of one cluster, with JetStream', async () => {
    expect(CLUSTER_URLS.length, 'DUETIME_NATS_CLUSTER_URLS lists three servers').toBe(3);
    const infos = [];
    for (const url of CLUSTER_URLS) {
      const nc = await connectTo([url]);
      opened.push(nc);
      infos.push(nc.info);
    }
    expect(new Set(infos.map((i) => i?.server_name)).size, 'server names').toBe(3);
    for (const info of infos) {
      expect(info?.jetstream, `${info?.server_name} runs JetStream`).toBe(true);
      expect(info?.cluster, `${info?.server_name} cluster name`).toBe(infos[0]?.cluster);
      const [major, minor] = String(info?.version).split('.').map(Number);
      expect(
        (major ?? 0) * 1000 + (minor ?? 0),
        `${info?.server_name} version ${info?.version}`,
      ).toBeGreaterThan(2011);
    }
  });

  it('creates a stream with three replicas that every server serves', async () => {
    const nc = await connectTo(CLUSTER_URLS);
    opened.push(nc);
    const jsm = await jetstreamManager(nc, { timeout: 10_000 });
    const name = `dtr3${randomBytes(4).toString('hex')}`;
    streams.push(name);
    // The JetStream API answers only once the meta group has a leader; the first request after the
    // cluster formed may still time out.
    const created = await until('the JetStream meta leader to create an R3 stream', () =>
      jsm.streams.add({ name, subjects: [`${name}.>`], num_replicas: 3, storage: StorageType.File }),
    );
    expect(created.config.num_replicas).toBe(3);
    // Publishes are answered once the stream's replicas have elected a leader (before that: no
    // responders), which a loaded machine can delay past the stream's creation.
    await until('the R3 stream to elect a leader', async () =>
      (await jsm.streams.info(name)).cluster?.leader ? true : undefined,
    );
    await untilServed(jsm, name);

    const js = jsm.jetstream();
    for (let i = 1; i <= 5; i++) {
      const ack = await js.publish(`${name}.m`, `message ${i}`);
      expect(ack.seq).toBe(i);
      expect(ack.stream).toBe(name);
    }

    // Placed on all three servers: a leader and two replicas, all current (caught up).
    const placed = await until('the stream replicas to be current', async () => {
      const info = await jsm.streams.info(name);
      const replicas = info.cluster?.replicas ?? [];
      return info.cluster?.leader && replicas.length === 2 && replicas.every((r) => r.current)
        ? info
        : undefined;
    });
    const members = [placed.cluster?.leader, ...(placed.cluster?.replicas ?? []).map((r) => r.name)];
    expect(new Set(members).size).toBe(3);
    expect(placed.state.messages).toBe(5);

    // Every server, asked on its own connection, sees the same stream and messages.
    for (const url of CLUSTER_URLS) {
      const single = await connectTo([url]);
      opened.push(single);
      const local = await jetstreamManager(single, { timeout: 10_000 });
      const info = await local.streams.info(name);
      expect(info.state.last_seq, `last sequence seen through ${url}`).toBe(5);
      const third = await local.streams.getMessage(name, { seq: 3 });
      expect(third?.string(), `message 3 read through ${url}`).toBe('message 3');
    }
  });
});
