/**
 * Test support for applications and adapters on NATS: a JetStream server, or a three-server JetStream
 * cluster, of the test's own, which it can crash and restart without disturbing a shared server. Import
 * from `@duetime/testing`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type ClusterNode,
  clusterNodes,
  type PrivateNatsNode,
  writeClusterConfigs,
} from './nats-cluster-config.js';
import { connectNats } from './nats-server.js';
import { freePorts } from './ports.js';

export type { PrivateNatsNode } from './nats-cluster-config.js';
export { newerNatsServerBinary, PrivateNatsServer, type PrivateNatsServerOptions } from './nats-server.js';

export interface PrivateNatsClusterOptions {
  /** The `nats-server` binary, 2.12 or later for the store (default: `DUETIME_NATS_SERVER_BIN`, else from PATH). */
  binary?: string;
  /** Servers in the cluster (default 3, the smallest that keeps a quorum of R3 streams with one lost). */
  size?: number;
  /** How long to wait for the cluster (or a restarted server) to be ready, in ms (default 60,000). */
  startTimeoutMs?: number;
  /**
   * JetStream's `sync_interval` on every server: how often a server fsyncs its stores (default: the
   * server's, two minutes). `'always'` fsyncs every write before it is acknowledged; otherwise a duration
   * such as `'10s'` or `'500ms'`.
   */
  syncInterval?: string;
}

/** One server's own copy of a stream, as its monitoring endpoint reports it (`/jsz`). */
export interface ReplicaState {
  port: number;
  messages: number;
  firstSeq: number;
  lastSeq: number;
  deleted: number;
}

/** Where a replicated stream lives right now: its leader and its other replicas, by client port. */
export interface StreamPlacement {
  /** The leader's client port, or undefined while the stream has no leader. */
  leader: number | undefined;
  replicas: { port: number; current: boolean; lagMessages: number }[];
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a value other than undefined; throws naming `what` after `timeoutMs`. */
async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`,
      );
    await pause(100);
  }
}

/**
 * A JetStream cluster of the test's own for tests that lose servers: `size` `nats-server` processes (three
 * by default) on free loopback ports, JetStream on each with its own store directory, joined by routes,
 * as `scripts/services.sh up --clusters` configures the shared cluster. A killed server restarts on the
 * same store and rejoins (its streams' replicas catch up from the others). Never the shared cluster.
 *
 * Servers are named by their client port. {@link streamPlacement} and {@link streamLeader} ask JetStream
 * (`STREAM.INFO`) where a stream's leader is, so a test can lose exactly the server that leads it.
 *
 * @example
 * const cluster = await PrivateNatsCluster.start({ binary: '/usr/sbin/nats-server' }); // >= 2.12
 * const backend = await createNatsBackend({ servers: cluster.urls }, { prefix: 'p', replicas: 3 });
 * const leader = await cluster.streamLeader('p_store');
 * await cluster.kill(leader);                          // SIGKILL
 * await cluster.waitStreamLeader('p_store', { not: leader });
 * await cluster.restart(leader);
 * await cluster.waitHealthy({ streams: ['p_store', 'p_lease'] });
 * await backend.close();
 * await cluster.dispose();
 */
export class PrivateNatsCluster {
  readonly binary: string;
  readonly #nodes: ClusterNode[];
  readonly #root: string;
  readonly #timeoutMs: number;

  private constructor(nodes: ClusterNode[], root: string, binary: string, timeoutMs: number) {
    this.#nodes = nodes;
    this.#root = root;
    this.binary = binary;
    this.#timeoutMs = timeoutMs;
  }

  /** Starts every server and waits until they answer with JetStream and agree on a meta leader. */
  static async start(options: PrivateNatsClusterOptions = {}): Promise<PrivateNatsCluster> {
    const size = options.size ?? 3;
    if (!Number.isInteger(size) || size < 1) throw new Error(`size must be a positive integer, got ${size}`);
    const sync = options.syncInterval;
    if (sync !== undefined && !(sync === 'always' || /^[1-9]\d*(ms|s|m|h)$/.test(sync)))
      throw new Error(
        `syncInterval must be 'always' or a duration such as '10s', got ${JSON.stringify(sync)}`,
      );
    const binary = options.binary ?? process.env.DUETIME_NATS_SERVER_BIN ?? 'nats-server';
    const ports = await freePorts(3 * size);
    const root = mkdtempSync(join(tmpdir(), 'duetime-nats-cluster-'));
    const nodes = clusterNodes(ports, size, root);
    writeClusterConfigs(nodes, { syncInterval: options.syncInterval });
    const cluster = new PrivateNatsCluster(nodes, root, binary, options.startTimeoutMs ?? 60_000);
    try {
      await Promise.all(nodes.map((n) => cluster.#launch(n)));
      await cluster.waitHealthy();
    } catch (error) {
      await cluster.dispose();
      throw error;
    }
    return cluster;
  }

  /** Every server's client URL (the `servers` of a connection that survives the loss of one). */
  get urls(): string[] {
    return this.#nodes.map((n) => n.url);
  }

  /** The servers, in the order of {@link urls}. */
  get nodes(): readonly PrivateNatsNode[] {
    return this.#nodes.map(({ name, port, url, monitorPort }) => ({ name, port, url, monitorPort }));
  }

  /** Client ports of the servers whose process runs (frozen ones included). */
  get running(): number[] {
    return this.#nodes.filter((n) => alive(n.child)).map((n) => n.port);
  }

  /** The client port of the server named `name` (as JetStream reports leaders and replicas). */
  portOf(name: string): number {
    const node = this.#nodes.find((n) => n.name === name);
    if (!node) throw new Error(`no server named ${name} in this cluster`);
    return node.port;
  }

  /** The process id of the server on `port`, while it runs. */
  pidOf(port: number): number | undefined {
    const child = this.#node(port).child;
    return alive(child) ? child?.pid : undefined;
  }

  /**
   * Where `stream` lives, asked of JetStream through a live, unfrozen server (`STREAM.INFO`). Throws
   * while no server answers for the stream (no leader elected yet, or the stream does not exist).
   */
  async streamPlacement(stream: string): Promise<StreamPlacement> {
    const info = (await this.#api(`$JS.API.STREAM.INFO.${stream}`)) as {
      cluster?: {
        leader?: string;
        replicas?: { name: string; current?: boolean; lag?: number; offline?: boolean }[];
      };
    };
    const cluster = info.cluster ?? {};
    return {
      leader: cluster.leader ? this.portOf(cluster.leader) : undefined,
      replicas: (cluster.replicas ?? []).map((r) => ({
        port: this.portOf(r.name),
        current: r.current === true && r.offline !== true,
        lagMessages: r.lag ?? 0,
      })),
    };
  }

  /** The client port of `stream`'s leader; throws while it has none. */
  async streamLeader(stream: string): Promise<number> {
    const { leader } = await this.streamPlacement(stream);
    if (leader === undefined) throw new Error(`stream ${stream} has no leader`);
    return leader;
  }

  /** Waits until `stream` has a leader (other than the server on `not`, when given); returns its port. */
  async waitStreamLeader(
    stream: string,
    options: { not?: number; timeoutMs?: number } = {},
  ): Promise<number> {
    return until(
      `a leader of stream ${stream}${options.not !== undefined ? ` other than ${options.not}` : ''}`,
      async () => {
        const { leader } = await this.streamPlacement(stream);
        return leader !== undefined && leader !== options.not ? leader : undefined;
      },
      options.timeoutMs ?? this.#timeoutMs,
    );
  }

  /** The client port of the JetStream meta leader, as the first live server reports it (`/jsz`). */
  async metaLeader(): Promise<number | undefined> {
    for (const n of this.#nodes) {
      if (!alive(n.child) || n.frozen) continue;
      const jsz = (await this.#monitor(n, '/jsz').catch(() => undefined)) as
        | { meta_cluster?: { leader?: string } }
        | undefined;
      const leader = jsz?.meta_cluster?.leader;
      if (leader) return this.portOf(leader);
    }
    return undefined;
  }

  /**
   * Waits until the cluster is whole: every server runs (none frozen) and reports itself healthy
   * (`/healthz`: its JetStream assets current), all of them know a meta leader of the full size, and each
   * of `streams` has a leader and every other replica current.
   */
  async waitHealthy(options: { streams?: readonly string[]; timeoutMs?: number } = {}): Promise<void> {
    const size = this.#nodes.length;
    await until(
      `the private NATS cluster to be healthy${options.streams?.length ? ` (streams ${options.streams.join(', ')})` : ''}`,
      async () => {
        for (const n of this.#nodes) {
          if (!alive(n.child) || n.frozen) return undefined;
          const health = (await this.#monitor(n, '/healthz')) as { status?: string };
          if (health.status !== 'ok') return undefined;
          const jsz = (await this.#monitor(n, '/jsz')) as {
            meta_cluster?: { leader?: string; cluster_size?: number };
          };
          if (!jsz.meta_cluster?.leader || jsz.meta_cluster.cluster_size !== size) return undefined;
        }
        for (const stream of options.streams ?? []) {
          const placement = await this.streamPlacement(stream);
          if (placement.leader === undefined) return undefined;
          if (!placement.replicas.every((r) => r.current)) return undefined;
        }
        return true;
      },
      options.timeoutMs ?? this.#timeoutMs,
    );
  }

  /** SIGKILL: the server dies at once, as in a crash (its store stays for {@link restart}). */
  async kill(port: number): Promise<void> {
    const node = this.#node(port);
    const child = node.child;
    node.frozen = false;
    if (!alive(child)) return;
    const exited = new Promise((resolve) => child?.once('exit', resolve));
    child?.kill('SIGKILL');
    await exited;
  }

  /** SIGSTOP: the server stops answering but keeps its connections and what they send it. */
  freeze(port: number): void {
    const node = this.#node(port);
    if (!alive(node.child)) return;
    node.child?.kill('SIGSTOP');
    node.frozen = true;
  }

  /** SIGCONT after {@link freeze}. */
  thaw(port: number): void {
    const node = this.#node(port);
    if (!node.frozen) return;
    node.child?.kill('SIGCONT');
    node.frozen = false;
  }

  /**
   * Starts a killed server again on its store and waits until it answers with JetStream; it rejoins the
   * cluster and its replicas catch up ({@link waitHealthy} waits for that).
   */
  async restart(port: number): Promise<void> {
    const node = this.#node(port);
    if (alive(node.child)) return;
    await this.#launch(node);
  }

  /** Stops every server and removes their stores. */
  async dispose(): Promise<void> {
    await Promise.all(
      this.#nodes.map(async (n) => {
        this.thaw(n.port);
        await this.kill(n.port);
      }),
    );
    rmSync(this.#root, { recursive: true, force: true });
  }

  #node(port: number): ClusterNode {
    const node = this.#nodes.find((n) => n.port === port);
    if (!node) throw new Error(`no server on port ${port} in this cluster`);
    return node;
  }

  async #launch(node: ClusterNode): Promise<void> {
    const bin = this.binary;
    const child = spawn(bin, ['-c', node.configFile, '-l', join(node.dir, 'nats-server.log')], {
      stdio: 'ignore',
    });
    node.child = child;
    node.frozen = false;
    let spawnError: Error | undefined;
    child.once('error', (error) => {
      spawnError = error;
    });
    const log = join(node.dir, 'nats-server.log');
    const deadline = Date.now() + this.#timeoutMs;
    for (;;) {
      if (spawnError)
        throw new Error(
          `could not run ${bin} (nats-server 2.12 or later is needed: bash scripts/services.sh up fetches it; pass its path as { binary } or in DUETIME_NATS_SERVER_BIN): ${spawnError.message}`,
        );
      if (!alive(child))
        throw new Error(
          `nats-server on port ${node.port} exited (${child.exitCode ?? child.signalCode}); see ${log}`,
        );
      const nc = await connectNats(node.url, { connectTimeoutMs: 500, maxReconnectAttempts: 0 }).catch(
        () => undefined,
      );
      if (nc) {
        const jetstream = nc.info?.jetstream === true;
        await nc.close();
        if (jetstream) return;
      }
      if (Date.now() > deadline)
        throw new Error(
          `nats-server on port ${node.port} did not answer with JetStream within ${this.#timeoutMs} ms; see ${log}`,
        );
      await pause(100);
    }
  }

  /** A JetStream API request through the first live, unfrozen server that answers. */
  async #api(subject: string): Promise<unknown> {
    let last: unknown = new Error('no server of the cluster runs');
    for (const n of this.#nodes) {
      if (!alive(n.child) || n.frozen) continue;
      const nc = await connectNats(n.url, { connectTimeoutMs: 1000, maxReconnectAttempts: 0 }).catch(
        (error: unknown) => {
          last = error;
          return undefined;
        },
      );
      if (!nc) continue;
      try {
        const reply = (await nc.request(subject, '', { timeout: 1000 })).json<{
          error?: { code: number; description: string };
        }>();
        if (reply.error) throw new Error(`${subject}: ${reply.error.description} (${reply.error.code})`);
        return reply;
      } catch (error) {
        last = error;
      } finally {
        await nc.close().catch(() => {});
      }
    }
    throw last;
  }

  /**
   * Each live server's own copy of `stream` (messages, first and last sequence), read from its `/jsz`.
   * Replicas of a quiet, healthy stream report the same; a difference that stays is a replica out of step.
   */
  async replicaStates(stream: string): Promise<ReplicaState[]> {
    const states: ReplicaState[] = [];
    for (const n of this.#nodes) {
      if (!alive(n.child) || n.frozen) continue;
      const jsz = (await this.#monitor(n, '/jsz?accounts=true&streams=true')) as {
        account_details?: {
          stream_detail?: {
            name: string;
            state?: { messages?: number; first_seq?: number; last_seq?: number; num_deleted?: number };
          }[];
        }[];
      };
      for (const account of jsz.account_details ?? [])
        for (const detail of account.stream_detail ?? [])
          if (detail.name === stream)
            states.push({
              port: n.port,
              messages: detail.state?.messages ?? 0,
              firstSeq: detail.state?.first_seq ?? 0,
              lastSeq: detail.state?.last_seq ?? 0,
              deleted: detail.state?.num_deleted ?? 0,
            });
    }
    return states;
  }

  /** A monitoring endpoint's JSON (`/healthz` answers 503 with a JSON body while unhealthy). */
  async #monitor(node: ClusterNode, path: string): Promise<unknown> {
    const response = await fetch(`http://127.0.0.1:${node.monitorPort}${path}`, {
      signal: AbortSignal.timeout(2000),
    });
    return response.json();
  }
}

function alive(child: ChildProcess | undefined): boolean {
  return child !== undefined && child.exitCode === null && child.signalCode === null;
}
