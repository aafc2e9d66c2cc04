import { randomBytes } from 'node:crypto';
import { waitFor } from '@duetime/conformance';
import { newerNatsServerBinary, PrivateNatsCluster } from '@duetime/testing';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { untilServed } from './schedules.js';

// PrivateNatsCluster (from '@duetime/testing'): a cluster of the test's own that tests lose
// servers of. Checked with the JetStream client alone: it forms one cluster, finds a replicated stream's
// leader, and after the leader is SIGKILLed or frozen another server leads, the lost one rejoins current,
// and every acknowledged message is on every server.

describe('PrivateNatsCluster', () => {
  const connections: NatsConnection[] = [];
  let cluster: PrivateNatsCluster | undefined;
  afterAll(async () => {
    await Promise.allSettled(connections.map((nc) => nc.close()));
    await cluster?.dispose();
  });

  it('says what to run when the binary is missing', async () => {
    await expect(
      PrivateNatsCluster.start({ binary: '/nonexistent/nats-server', startTimeoutMs: 5000 }),
    ).rejects.toThrow(/could not run \/nonexistent\/nats-server .*bash scripts\/services\.sh up/);
  });

  it('refuses a sync interval that is neither always nor a duration, naming it', async () => {
    await expect(PrivateNatsCluster.start({ syncInterval: 'often' })).rejects.toThrow(
      /syncInterval must be 'always' or a duration such as '10s', got "often"/,
    );
  });

  it('loses the leader of an R3 stream (SIGKILL, then a freeze): another leads, nothing acknowledged is lost', async () => {
    cluster = await PrivateNatsCluster.start({ binary: newerNatsServerBinary(), syncInterval: 'always' });
    expect(cluster.nodes).toHaveLength(3);
    expect(new Set(cluster.nodes.map((n) => n.name)).size).toBe(3);
    expect(cluster.running.sort()).toEqual(cluster.nodes.map((n) => n.port).sort());
    expect(cluster.nodes.map((n) => n.port)).toContain(await cluster.metaLeader());

    const nc = await connectNats(cluster.urls);
    connections.push(nc);
    const jsm = await jetstreamManager(nc, { timeout: 10_000 });
    const js = jsm.jetstream();
    const name = `pc${randomBytes(4).toString('hex')}`;
    await jsm.streams.add({ name, subjects: [`${name}.>`], num_replicas: 3, storage: StorageType.File });
    // A new R3 stream answers publishes once its replicas have elected a leader (before that: no
    // responders), which a loaded machine can delay past the stream's creation.
    await cluster.waitHealthy({ streams: [name] });
    await untilServed(jsm, name);
    let acknowledged = 0;
    const publish = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const ack = await js.publish(`${name}.m`, `message ${acknowledged + 1}`, { timeout: 20_000 });
        acknowledged++;
        expect(ack.seq).toBe(acknowledged);
      }
    };
    await publish(10);
    await cluster.waitHealthy({ streams: [name] });
    const placed = await cluster.streamPlacement(name);
    const first = placed.leader as number;
    expect(cluster.nodes.map((n) => n.port)).toContain(first);
    expect(placed.replicas.map((r) => r.port).sort()).toEqual(
      cluster.nodes
        .map((n) => n.port)
        .filter((p) => p !== first)
        .sort(),
    );
    expect(await cluster.streamLeader(name)).toBe(first);

    await cluster.kill(first);
    expect(cluster.running).not.toContain(first);
    expect(cluster.pidOf(first)).toBeUndefined();
    const second = await cluster.waitStreamLeader(name, { not: first });
    expect(second).not.toBe(first);
    await publish(10); // acknowledged by the two servers left
    await cluster.restart(first);
    await cluster.waitHealthy({ streams: [name] });
    const rejoined = await cluster.streamPlacement(name);
    expect(rejoined.replicas.find((r) => r.port === first)?.current).toBe(true);

    const leader = rejoined.leader as number;
    cluster.freeze(leader);
    const third = await cluster.waitStreamLeader(name, { not: leader });
    expect(third).not.toBe(leader);
    cluster.thaw(leader);
    await cluster.waitHealthy({ streams: [name] });

    for (const node of cluster.nodes) {
      const single = await connectNats(node.url);
      connections.push(single);
      const local = await jetstreamManager(single, { timeout: 10_000 });
      const info = await local.streams.info(name);
      expect(info.state.last_seq, `last sequence seen through ${node.name}`).toBe(acknowledged);
      const last = await local.streams.getMessage(name, { seq: acknowledged });
      expect(last?.string(), `message ${acknowledged} read through ${node.name}`).toBe(
        `message ${acknowledged}`,
      );
    }
    // Each server's own copy, from its monitoring endpoint: all three hold every acknowledged message
    // (followers apply a moment after the leader).
    await waitFor('every server to hold every acknowledged message', async () => {
      const states = await cluster!.replicaStates(name);
      return (
        states.length === 3 && states.every((r) => r.messages === acknowledged && r.lastSeq === acknowledged)
      );
    });
    expect((await cluster.replicaStates(name)).map((r) => r.port).sort()).toEqual(
      cluster.nodes.map((n) => n.port).sort(),
    );
  });
});
