/**
 * Test support for applications and adapters on Redis: servers and clusters of the test's own, which it can
 * crash, freeze and restart without disturbing a shared server. Import from `@duetime/testing`.
 * They run `redis-server` and `redis-cli` from `PATH` (Redis 7).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePorts } from './ports.js';

const run = promisify(execFile);

/** Polls `check` every `intervalMs` until it returns a truthy value; throws naming `what` after `timeoutMs`. */
async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (options.timeoutMs ?? 20_000);
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
  }
}

/** One node of a private cluster: its port, its cluster bus port, and its process while it runs. */
interface Node {
  port: number;
  busPort: number;
  dir: string;
  process?: ChildProcess;
  frozen: boolean;
}

export interface PrivateClusterOptions {
  /** Masters (each gets `replicas` replicas). Default 3. */
  masters?: number;
  replicas?: number;
  /** `cluster-node-timeout` in ms: how long a master may be unreachable before its replica takes over. */
  nodeTimeout?: number;
  /** Extra `redis-server` arguments for every node (`--appendonly yes`, …). */
  serverArgs?: string[];
}

/**
 * A Redis Cluster of its own for tests that kill, freeze and restart nodes: `redis-server` processes (the
 * same binary `scripts/services.sh` runs) on free loopback ports, formed with `redis-cli --cluster create`,
 * each node's `nodes.conf` in a temporary directory so that a restarted node rejoins (as a replica of
 * whichever node took over its slots). Never the shared cluster of `up --clusters`.
 */
export class PrivateRedisCluster {
  readonly #nodes: Node[];
  readonly #options: Required<PrivateClusterOptions>;
  readonly #root: string;

  private constructor(nodes: Node[], options: Required<PrivateClusterOptions>, root: string) {
    this.#nodes = nodes;
    this.#options = options;
    this.#root = root;
  }

  static async start(options: PrivateClusterOptions = {}): Promise<PrivateRedisCluster> {
    const resolved: Required<PrivateClusterOptions> = {
      masters: options.masters ?? 3,
      replicas: options.replicas ?? 1,
      nodeTimeout: options.nodeTimeout ?? 1000,
      serverArgs: options.serverArgs ?? [],
    };
    const count = resolved.masters * (1 + resolved.replicas);
    const ports = await freePorts(2 * count);
    const root = join(tmpdir(), `duetime-redis-cluster-${process.pid}-${Date.now()}`);
    const nodes: Node[] = [];
    for (let i = 0; i < count; i++) {
      const dir = join(root, String(i));
      mkdirSync(dir, { recursive: true });
      nodes.push({ port: ports[2 * i] as number, busPort: ports[2 * i + 1] as number, dir, frozen: false });
    }
    const cluster = new PrivateRedisCluster(nodes, resolved, root);
    try {
      for (const node of nodes) cluster.#spawn(node);
      await Promise.all(nodes.map((n) => waitFor(`redis node ${n.port}`, () => ping(n.port))));
      await run(
        'redis-cli',
        [
          '--cluster',
          'create',
          ...nodes.map((n) => `127.0.0.1:${n.port}`),
          '--cluster-replicas',
          String(resolved.replicas),
          '--cluster-yes',
        ],
        { timeout: 60_000 },
      );
      await cluster.waitHealthy();
    } catch (error) {
      await cluster.stop();
      throw new Error(
        `could not start a private Redis Cluster (redis-server and redis-cli are needed: bash scripts/services.sh up): ${String(error)}`,
      );
    }
    return cluster;
  }

  /** Every node's URL (the startup nodes of a `Cluster` client). */
  get urls(): string[] {
    return this.#nodes.map((n) => `redis://127.0.0.1:${n.port}`);
  }

  /** The ports of the nodes that run (not killed; frozen ones included). */
  get running(): number[] {
    return this.#nodes.filter((n) => n.process).map((n) => n.port);
  }

  /** The port of the master serving `key`'s slot, asked of a live node. */
  async masterOf(key: string): Promise<number> {
    return this.#ask(async (node) => {
      const slot = Number(await node.cluster('KEYSLOT', key));
      for (const [start, end, master] of await node.cluster('SLOTS'))
        if (master && slot >= start && slot <= end) return Number(master[1]);
      throw new Error(`no master serves slot ${slot}`);
    });
  }

  /** SIGKILL: the node dies at once, as in a crash. */
  async kill(port: number): Promise<void> {
    const node = this.#node(port);
    const child = node.process;
    if (!child) return;
    node.process = undefined;
    node.frozen = false;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  /** SIGSTOP: the node stops answering but keeps its connections and whatever they send it. */
  freeze(port: number): void {
    const node = this.#node(port);
    node.process?.kill('SIGSTOP');
    node.frozen = true;
  }

  /** SIGCONT after {@link freeze}: the node runs again and handles what queued up meanwhile. */
  thaw(port: number): void {
    const node = this.#node(port);
    node.process?.kill('SIGCONT');
    node.frozen = false;
  }

  /** Starts a killed node again with its `nodes.conf`: it rejoins the cluster. */
  restart(port: number): void {
    const node = this.#node(port);
    if (!node.process) this.#spawn(node);
  }

  /**
   * Waits until every node runs and answers, all see each other, every slot is served, every master has its
   * replicas and every replica's link is up and synchronised.
   */
  async waitHealthy(timeoutMs = 60_000): Promise<void> {
    const total = this.#nodes.length;
    await waitFor(
      'the private Redis Cluster to be healthy',
      async () => {
        for (const n of this.#nodes) {
          if (!n.process || n.frozen) return false;
          const info = await nodeInfo(n.port);
          if (info.cluster_state !== 'ok' || info.cluster_known_nodes !== String(total)) return false;
          if (info.cluster_slots_ok !== '16384') return false;
          if (info.role === 'master' && Number(info.connected_slaves) < this.#options.replicas) return false;
          if (
            info.role === 'slave' &&
            (info.master_link_status !== 'up' || info.master_sync_in_progress !== '0')
          )
            return false;
        }
        return true;
      },
      { timeoutMs, intervalMs: 100 },
    );
  }

  /** Waits until another node than `port` serves `key`'s slot and the live nodes report the cluster ok. */
  async waitTakenOver(key: string, port: number, timeoutMs = 60_000): Promise<number> {
    return waitFor(
      `another master than ${port} to serve ${key}`,
      async () => {
        const master = await this.masterOf(key);
        if (master === port) return undefined;
        const info = await nodeInfo(master);
        return info.cluster_state === 'ok' && info.role === 'master' ? master : undefined;
      },
      { timeoutMs, intervalMs: 100 },
    );
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.#nodes.map(async (n) => {
        if (n.frozen) this.thaw(n.port);
        await this.kill(n.port);
      }),
    );
    rmSync(this.#root, { recursive: true, force: true });
  }

  #node(port: number): Node {
    const node = this.#nodes.find((n) => n.port === port);
    if (!node) throw new Error(`no node on port ${port} in this cluster`);
    return node;
  }

  #spawn(node: Node): void {
    node.process = spawnServer(
      [
        '--port',
        String(node.port),
        '--cluster-port',
        String(node.busPort),
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-node-timeout',
        String(this.#options.nodeTimeout),
        '--save',
        '',
        '--appendonly',
        'no',
        // A restarted node resynchronises at once, not after the default 5 s wait for more replicas.
        '--repl-diskless-sync-delay',
        '0',
        ...this.#options.serverArgs,
      ],
      node.dir,
    );
  }

  /** Asks the first live, unfrozen node that answers. */
  async #ask<T>(question: (node: Redis) => Promise<T>): Promise<T> {
    let last: unknown;
    for (const n of this.#nodes) {
      if (!n.process || n.frozen) continue;
      const node = connection(n.port);
      try {
        return await question(node);
      } catch (error) {
        last = error;
      } finally {
        node.disconnect();
      }
    }
    throw new Error(`no node of the private cluster answered: ${String(last)}`);
  }
}

/**
 * One `redis-server` of the test's own on a free loopback port, its data in a temporary directory, no
 * persistence unless `serverArgs` ask for it (`['--appendonly', 'yes', '--appendfsync', 'always']`).
 * `kill` is a crash (SIGKILL); `restart` starts it again on the same directory (what it persisted survives).
 *
 * @example
 * const server = await PrivateRedisServer.start({ serverArgs: ['--appendonly', 'yes'] });
 * const backend = await createRedisBackend({ url: server.url });
 * await server.kill();
 * await server.restart();
 */
export class PrivateRedisServer {
  readonly port: number;
  readonly #dir: string;
  readonly #args: string[];
  #process: ChildProcess | undefined;

  private constructor(port: number, dir: string, args: string[]) {
    this.port = port;
    this.#dir = dir;
    this.#args = args;
  }

  static async start(options: { serverArgs?: string[] } = {}): Promise<PrivateRedisServer> {
    const [port] = await freePorts(1);
    const dir = join(tmpdir(), `duetime-redis-${process.pid}-${Date.now()}-${port}`);
    mkdirSync(dir, { recursive: true });
    const server = new PrivateRedisServer(port as number, dir, options.serverArgs ?? []);
    try {
      await server.restart();
    } catch (error) {
      await server.stop();
      throw error;
    }
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** SIGKILL: the server dies at once, as in a crash; what it had not persisted is gone. */
  async kill(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  /** Starts it (again, on the same directory) and waits until it answers and has loaded its data. */
  async restart(): Promise<void> {
    if (this.#process) return;
    this.#process = spawnServer(
      ['--port', String(this.port), '--save', '', '--appendonly', 'no', ...this.#args],
      this.#dir,
    );
    await waitFor(`redis-server on port ${this.port}`, async () => {
      const node = connection(this.port);
      try {
        return !/loading:1/.test(await node.info('persistence'));
      } finally {
        node.disconnect();
      }
    });
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** `redis-server` on loopback with `args`, its files and log in `dir`. */
function spawnServer(args: string[], dir: string): ChildProcess {
  const child = spawn(
    'redis-server',
    ['--bind', '127.0.0.1', '--dir', dir, '--logfile', join(dir, 'redis.log'), ...args],
    { stdio: 'ignore' },
  );
  child.once('error', () => {});
  return child;
}

function connection(port: number): Redis {
  const node = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    connectTimeout: 1000,
    commandTimeout: 2000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  node.on('error', () => {});
  return node;
}

async function ping(port: number): Promise<boolean> {
  const node = connection(port);
  try {
    return (await node.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    node.disconnect();
  }
}

/** `CLUSTER INFO` and `INFO replication` of one node, as one record. */
async function nodeInfo(port: number): Promise<Record<string, string>> {
  const node = connection(port);
  try {
    const text = `${String(await node.cluster('INFO'))}\n${await node.info('replication')}`;
    const fields: Record<string, string> = {};
    for (const line of text.split(/\r?\n/)) {
      const i = line.indexOf(':');
      if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trim();
    }
    return fields;
  } finally {
    node.disconnect();
  }
}
