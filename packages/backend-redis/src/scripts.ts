import { BackendError } from '@duetime/core';
import { Cluster, type Redis } from 'ioredis';
import { mapRedisError } from './errors.js';
import { type LuaScriptName, luaScripts } from './lua/scripts.generated.js';

/** The ioredis client duetime talks through: a single server or a cluster. */
export type RedisClient = Redis | Cluster;

export type Arg = string | number;

/** How many replicas must confirm a write before it counts as done (`WAIT`), and the `WAIT` timeout in ms. */
export type ReplicaWait = { replicas: number; timeoutMs: number };

/**
 * The scripts whose writes a failover must not lose: a commit (schedules, events, consumptions), a lease's
 * acquisition and renewal (a lost one lets a second holder in, or a repeated fencing token), and a cursor's
 * advance (a lost one re-runs an occurrence). Claims and recorded failures only steer deliveries.
 */
const REPLICATED = new Set<LuaScriptName>(['commit', 'lease-acquire', 'lease-renew', 'cursor-advance']);

/** How long loading the scripts into one master of a cluster may take before it is left to NOSCRIPT. */
const MASTER_LOAD_MS = 2000;

/** `pending`, or an error (`timedOut()`'s) after `ms`. */
export function within<T>(
  ms: number,
  pending: Promise<T>,
  timedOut = () => new Error(`no answer within ${ms} ms`),
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), ms);
  });
  return Promise.race([pending, expired]).finally(() => clearTimeout(timer));
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * Runs the embedded Lua commands by SHA (EVALSHA). A server that does not know a script (restarted, or
 * `SCRIPT FLUSH`) answers NOSCRIPT, which means nothing ran: the script is then sent whole once (EVAL).
 * With a {@link ReplicaWait}, the scripts that must survive a failover are followed by `WAIT` on the same
 * connection. `timeoutMs`, when given, bounds every call (on clients whose `commandTimeout` duetime does
 * not control): a command that never settles becomes an error, not a hang.
 */
export class ScriptRunner {
  constructor(
    readonly client: RedisClient,
    readonly target = '',
    readonly timeoutMs?: number,
    readonly wait?: ReplicaWait,
  ) {}

  /**
   * Loads every script (SCRIPT LOAD) and checks the server computes the same SHAs. On a cluster each node
   * has its own script cache: every master gets them, and a master that does not answer within two seconds
   * is left to the NOSCRIPT fallback (one master that cannot be reached must not stop a store living on
   * another); at least one must load them.
   */
  async load(): Promise<void> {
    const loadInto = async (node: RedisClient) => {
      for (const [name, script] of Object.entries(luaScripts)) {
        const sha = (await node.script('LOAD', script.source)) as unknown;
        // A server that computes another SHA than the embedded one: not a server to run on.
        const mismatch = `the server loaded script ${name} as ${sha}, expected ${script.sha}`;
        if (sha !== script.sha) throw new BackendError('load scripts', mismatch);
      }
    };
    const masters = this.client instanceof Cluster ? this.client.nodes('master') : [];
    if (masters.length === 0) return loadInto(this.client);
    const outcomes = await Promise.allSettled(masters.map((node) => within(MASTER_LOAD_MS, loadInto(node))));
    const loaded = outcomes.filter((o) => o.status === 'fulfilled').length;
    const failures = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
    const mismatch = failures.find((e) => e instanceof BackendError);
    if (mismatch || loaded === 0) throw mismatch ?? failures[0];
  }

  async run(name: LuaScriptName, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    const script = luaScripts[name];
    // One array argument (ioredis flattens it): a large transaction has more arguments than a call's stack.
    const command: Arg[] = [script.sha, keys.length];
    for (const key of keys) command.push(key);
    for (const arg of args) command.push(arg);
    const wait = this.wait && REPLICATED.has(name) ? this.wait : undefined;
    if (wait) return this.#runAndWait(name, command.slice(1), wait);
    try {
      return await this.call((c) => c.call('EVALSHA', command));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      command[0] = script.source;
      return await this.call((c) => c.call('EVAL', command));
    }
  }

  /**
   * The script, then `WAIT`, in one pipeline: ioredis sends a cluster pipeline to the node of its keys, and
   * WAIT (which has none) rides along, so it waits for what that connection just wrote. A script that found
   * its work already done (a resent commit) still writes a little, so the WAIT covers the first run too.
   */
  async #runAndWait(name: LuaScriptName, rest: Arg[], wait: ReplicaWait): Promise<unknown> {
    const script = luaScripts[name];
    const send = (command: 'EVALSHA' | 'EVAL') =>
      this.call((c) =>
        c
          .pipeline()
          .call(command, [command === 'EVALSHA' ? script.sha : script.source, ...rest])
          .call('WAIT', wait.replicas, wait.timeoutMs)
          .exec(),
      );
    let results = await send('EVALSHA');
    if (isNoScript(results?.[0]?.[0])) results = await send('EVAL');
    const [[scriptError, reply] = [], [waitError, acknowledged] = []] = results ?? [];
    if (scriptError) {
      // A pipeline whose commands got different replies is not redirected by ioredis: learn the new slot
      // owners, and let the caller's retry go there.
      if (this.client instanceof Cluster && /^(MOVED|ASK) /.test(scriptError.message))
        this.client.refreshSlotsCache();
      throw scriptError;
    }
    if (waitError) throw waitError;
    if (Number(acknowledged) < wait.replicas)
      throw new BackendError(
        name,
        `applied on the primary but confirmed by ${Number(acknowledged)} of ${wait.replicas} replicas within ${wait.timeoutMs} ms; a failover now could lose it`,
        { transient: true },
      );
    return reply;
  }

  /** Runs one command on the client, bounded by the timeout when one is set. */
  call<T>(command: (client: RedisClient) => Promise<T>): Promise<T> {
    const pending = command(this.client);
    if (this.timeoutMs === undefined) return pending;
    const ms = this.timeoutMs;
    return within(ms, pending, () => new Error(`Command timed out after ${ms} ms`));
  }

  /** Runs script `name`; a failure becomes duetime's error for `operation` (naming `key` for WRONGTYPE). */
  script(
    operation: string,
    name: LuaScriptName,
    keys: readonly string[],
    args: readonly Arg[],
    key?: string,
  ) {
    return this.read(operation, key, () => this.run(name, keys, args));
  }

  /** Runs one command; a failure becomes duetime's error for `operation` (naming `key` for WRONGTYPE). */
  async read<T>(operation: string, key: string | undefined, command: (client: RedisClient) => Promise<T>) {
    try {
      return await this.call(command);
    } catch (error) {
      throw mapRedisError(error, operation, this.target, key);
    }
  }
}
