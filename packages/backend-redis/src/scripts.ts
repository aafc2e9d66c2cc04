import type { Cluster, Redis } from 'ioredis';
import { type LuaScriptName, luaScripts } from './lua/scripts.generated.js';

/** The ioredis client duetime talks through: a single server or a cluster. */
export type RedisClient = Redis | Cluster;

type Arg = string | number;

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * Runs the embedded Lua commands by SHA (EVALSHA). A server that does not know a script (restarted, or
 * `SCRIPT FLUSH`) answers NOSCRIPT; the script is then sent whole once (EVAL, which also caches it again).
 * NOSCRIPT means nothing ran, so the fallback never applies a script twice.
 */
export class ScriptRunner {
  readonly #client: RedisClient;
  readonly #timeoutMs: number | undefined;

  /**
   * `timeoutMs`, when given, bounds every call made through {@link ScriptRunner.call} (for clients whose own
   * `commandTimeout` duetime does not control): a command that never settles (ioredis drops unanswered
   * commands on reconnect when `autoResendUnfulfilledCommands` is off) becomes an error, not a hang.
   */
  constructor(client: RedisClient, timeoutMs?: number) {
    this.#client = client;
    this.#timeoutMs = timeoutMs;
  }

  get client(): RedisClient {
    return this.#client;
  }

  /** Loads every script once (SCRIPT LOAD) and checks the server computes the same SHAs. */
  async load(): Promise<void> {
    for (const [name, script] of Object.entries(luaScripts)) {
      const sha = (await this.#client.script('LOAD', script.source)) as unknown;
      if (sha !== script.sha)
        throw new Error(`the server loaded script ${name} as ${String(sha)}, expected ${script.sha}`);
    }
  }

  async run(name: LuaScriptName, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    const script = luaScripts[name];
    // One array argument (ioredis flattens it): a large transaction has more arguments than a call's stack.
    const rest: Arg[] = [keys.length, ...keys, ...args];
    try {
      return await this.call((c) => c.call('EVALSHA', [script.sha as string, ...rest]));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return await this.call((c) => c.call('EVAL', [script.source as string, ...rest]));
    }
  }

  /** Runs one command on the client, bounded by the timeout when one is set. */
  call<T>(command: (client: RedisClient) => Promise<T>): Promise<T> {
    const pending = command(this.#client);
    if (this.#timeoutMs === undefined) return pending;
    const ms = this.#timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      pending,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Command timed out after ${ms} ms`)), ms);
      }),
    ]).finally(() => clearTimeout(timer));
  }
}
