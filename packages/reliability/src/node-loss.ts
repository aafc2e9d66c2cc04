import type { PrivateNatsCluster, PrivateRedisCluster } from '@duetime/testing';
import type { PutOp } from './driver.js';
import type { Random } from './random.js';

/**
 * How a master is lost: `kill` is a crash (SIGKILL; it comes back empty, as a replica of the node that
 * took over); `freeze` is a hang (SIGSTOP until its replica has taken over, then SIGCONT: it runs again,
 * handles what its clients sent meanwhile, then learns it was demoted), the shape of a partition or a
 * long stall.
 */
export type NodeFaultKind = 'kill' | 'freeze';

export interface NodeFault {
  kind: NodeFaultKind;
  port: number;
  /** When the master was killed or frozen. */
  at: number;
  /** When another node served the store's slot. */
  takenOverAt: number;
  /** When the old master ran again (restarted or thawed). */
  backAt: number;
  /** When the cluster was whole again (every master with a replica in sync; NATS: every replica current). */
  healthyAt: number;
  /** NATS: the server that led the stream after the loss (the restarted one may win the election again). */
  successor?: number;
  /** NATS: the lost server was started again before another one led the stream. */
  restartedBeforeTakeover?: boolean;
  /** NATS: the lost server also led these other streams (the lease stream, say). */
  alsoLed?: string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Loses the master serving `key`, `count` times, alternating crashes and hangs, with a random pause of
 * normal work before each; waits for its replica to take over and for the cluster to heal each time.
 */
export async function loseMasters(options: {
  cluster: PrivateRedisCluster;
  key: string;
  count: number;
  random: Random;
  log: (line: string) => void;
}): Promise<NodeFault[]> {
  const { cluster, key, random, log } = options;
  const faults: NodeFault[] = [];
  const first = random.int(0, 1);
  for (let i = 0; i < options.count; i++) {
    await sleep(random.int(500, 2000));
    const kind: NodeFaultKind = (i + first) % 2 === 0 ? 'kill' : 'freeze';
    const port = await cluster.masterOf(key);
    const at = Date.now();
    if (kind === 'kill') await cluster.kill(port);
    else cluster.freeze(port);
    const successor = await cluster.waitTakenOver(key, port);
    const takenOverAt = Date.now();
    if (kind === 'kill') cluster.restart(port);
    else cluster.thaw(port);
    const backAt = Date.now();
    await cluster.waitHealthy();
    const fault = { kind, port, at, takenOverAt, backAt, healthyAt: Date.now() };
    faults.push(fault);
    log(
      `${kind} of master ${port}: ${successor} took over after ${takenOverAt - at} ms, healthy again after ${fault.healthyAt - at} ms`,
    );
  }
  return faults;
}

/**
 * The fault around which a put's transaction returned: from a second before the master was lost until the
 * cluster was whole again. Undefined when it returned outside every such window.
 */
export function faultAround(put: PutOp, faults: NodeFault[]): NodeFault | undefined {
  const at = put.doneAt;
  if (at === undefined) return undefined;
  return faults.find((f) => at >= f.at - 1000 && at <= f.healthyAt);
}

/**
 * Loses the NATS server leading `stream` once: SIGKILL, then either
 * - a new leader is awaited among the others, and the lost server is started again a little later, or
 * - (`early`) it is started again after 0.2–3 s, before the others may have elected a new leader (the
 *   election then runs with it back, and it may lead again);
 * then waits until the cluster is whole: every server healthy and each of `streams` with a leader and
 * every replica current.
 */
export async function loseStreamLeader(options: {
  cluster: PrivateNatsCluster;
  stream: string;
  streams: readonly string[];
  early: boolean;
  random: Random;
}): Promise<NodeFault> {
  const { cluster, stream, streams, early, random } = options;
  const port = await cluster.waitStreamLeader(stream);
  const alsoLed: string[] = [];
  for (const other of streams)
    if (other !== stream && (await cluster.streamLeader(other).catch(() => undefined)) === port)
      alsoLed.push(other);
  const at = Date.now();
  await cluster.kill(port);
  let successor: number;
  let takenOverAt: number;
  let backAt: number;
  if (early) {
    await sleep(random.int(200, 3000));
    await cluster.restart(port);
    backAt = Date.now();
    successor = await cluster.waitStreamLeader(stream);
    takenOverAt = Date.now();
  } else {
    successor = await cluster.waitStreamLeader(stream, { not: port });
    takenOverAt = Date.now();
    await sleep(random.int(0, 1500));
    await cluster.restart(port);
    backAt = Date.now();
  }
  await cluster.waitHealthy({ streams });
  return {
    kind: 'kill',
    port,
    at,
    takenOverAt,
    backAt,
    healthyAt: Date.now(),
    successor,
    restartedBeforeTakeover: early,
    alsoLed,
  };
}

/** One line about a lost stream leader, for the run's log. */
export function describeLeaderLoss(stream: string, fault: NodeFault): string {
  const also = fault.alsoLed?.length ? ` (it also led ${fault.alsoLed.join(', ')})` : '';
  const back = fault.restartedBeforeTakeover
    ? `restarted after ${fault.backAt - fault.at} ms, then ${fault.successor} led after ${fault.takenOverAt - fault.at} ms`
    : `${fault.successor} led after ${fault.takenOverAt - fault.at} ms, restarted after ${fault.backAt - fault.at} ms`;
  return `SIGKILL of ${fault.port}, leader of ${stream}${also}: ${back}, whole again after ${fault.healthyAt - fault.at} ms`;
}

/**
 * Loses the NATS server leading `stream`, `count` times, with a random pause of normal work before each,
 * half of them started again before a new leader was elected (see {@link loseStreamLeader}).
 */
export async function loseStreamLeaders(options: {
  cluster: PrivateNatsCluster;
  stream: string;
  streams: readonly string[];
  count: number;
  random: Random;
  log: (line: string) => void;
}): Promise<NodeFault[]> {
  const { random } = options;
  const faults: NodeFault[] = [];
  const first = random.int(0, 1);
  for (let i = 0; i < options.count; i++) {
    await sleep(random.int(500, 2000));
    const fault = await loseStreamLeader({ ...options, early: (i + first) % 2 === 1 });
    faults.push(fault);
    options.log(describeLeaderLoss(options.stream, fault));
  }
  return faults;
}

/** A server a node-loss run can crash and start again (a private PostgreSQL server, say). */
export interface CrashableServer {
  readonly port: number;
  /** SIGKILL to every process of the server; resolves once they are gone. */
  kill(): Promise<void>;
  /** Starts it again on its data; resolves once it serves again. */
  restart(): Promise<void>;
}

/**
 * Crashes a single server `count` times (SIGKILL to all its processes), with a random pause of normal
 * work before each, and starts it again on its data after 0.2–2 s down. There is no replica to take
 * over: the store is unavailable until the server is back (`takenOverAt` is when it served again).
 */
export async function crashServer(options: {
  server: CrashableServer;
  count: number;
  random: Random;
  log: (line: string) => void;
}): Promise<NodeFault[]> {
  const { server, random } = options;
  const faults: NodeFault[] = [];
  for (let i = 0; i < options.count; i++) {
    await sleep(random.int(500, 2000));
    const at = Date.now();
    await server.kill();
    const down = random.int(200, 2000);
    await sleep(down);
    await server.restart();
    const back = Date.now();
    faults.push({ kind: 'kill', port: server.port, at, takenOverAt: back, backAt: back, healthyAt: back });
    options.log(
      `SIGKILL of the server on ${server.port}: down ${down} ms, serving again after ${back - at} ms`,
    );
  }
  return faults;
}
