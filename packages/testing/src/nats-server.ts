/**
 * A JetStream server of the test's own (see `nats.ts` for the cluster). Import from `@duetime/testing`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { freePort } from './ports.js';

/** A plain connection for readiness checks: no reconnection, a short timeout. */
export function connectNats(
  url: string,
  options: { connectTimeoutMs: number; maxReconnectAttempts?: number },
): Promise<NatsConnection> {
  return connect({ servers: url, timeout: options.connectTimeoutMs, reconnect: false });
}

/**
 * A `nats-server` binary >= 2.12 (the store needs it) for a server of the test's own:
 * `DUETIME_NATS_SERVER_BIN`, else the one `bash scripts/services.sh up` fetched into its cache
 * (`DUETIME_CACHE_DIR`, default `~/.cache/duetime`). Throws, saying how to get one, when neither exists.
 */
export function newerNatsServerBinary(): string {
  const given = process.env.DUETIME_NATS_SERVER_BIN;
  if (given) return given;
  const cache =
    process.env.DUETIME_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'duetime');
  const fetched = join(cache, 'nats-new', 'root', 'usr', 'sbin', 'nats-server');
  if (existsSync(fetched)) return fetched;
  throw new Error(
    `no nats-server >= 2.12 at ${fetched}; run 'bash scripts/services.sh up' to fetch it, or set DUETIME_NATS_SERVER_BIN`,
  );
}

export interface PrivateNatsServerOptions {
  /** The `nats-server` binary (default: `DUETIME_NATS_SERVER_BIN`, else `nats-server` from PATH). */
  binary?: string;
  /** How long to wait for it to answer with JetStream on, in ms (default 20,000). */
  startTimeoutMs?: number;
}

/**
 * A `nats-server -js` on its own loopback port and store directory. `kill` is a crash (SIGKILL, no clean
 * shutdown); `restart` starts it again on the same store, so streams survive; `dispose` stops it and
 * removes the store.
 *
 * @example
 * const server = await PrivateNatsServer.start();
 * const backend = await createNatsBackend({ servers: server.url });
 * await server.restart(500); // down for half a second
 */
export class PrivateNatsServer {
  readonly port: number;
  readonly dir: string;
  readonly url: string;
  readonly binary: string;
  readonly #startTimeoutMs: number;
  #child: ChildProcess | undefined;
  #restarts = 0;

  private constructor(port: number, options: PrivateNatsServerOptions) {
    this.port = port;
    this.dir = mkdtempSync(join(tmpdir(), 'duetime-nats-'));
    this.url = `nats://127.0.0.1:${port}`;
    this.binary = options.binary ?? process.env.DUETIME_NATS_SERVER_BIN ?? 'nats-server';
    this.#startTimeoutMs = options.startTimeoutMs ?? 20_000;
  }

  /** How many times {@link restart} started it again. */
  get restarts(): number {
    return this.#restarts;
  }

  /** Starts a server and waits until it answers with JetStream enabled. */
  static async start(options: PrivateNatsServerOptions = {}): Promise<PrivateNatsServer> {
    const server = new PrivateNatsServer(await freePort(), options);
    try {
      await server.#launch();
    } catch (error) {
      await server.dispose();
      throw error;
    }
    return server;
  }

  async #launch(): Promise<void> {
    const bin = this.binary;
    const child = spawn(bin, ['-a', '127.0.0.1', '-p', String(this.port), '-js', '-sd', this.dir], {
      stdio: 'ignore',
    });
    this.#child = child;
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (error) =>
        reject(
          new Error(
            `could not run ${bin} (install nats-server 2.12 or later, and pass its path as { binary } or in DUETIME_NATS_SERVER_BIN): ${error.message}`,
          ),
        ),
      );
    });
    failed.catch(() => {});
    const deadline = Date.now() + this.#startTimeoutMs;
    for (;;) {
      const nc = await Promise.race([connectNats(this.url, { connectTimeoutMs: 500 }), failed]).catch(
        (error: unknown) => {
          if (
            Date.now() > deadline ||
            child.exitCode !== null ||
            (error as Error).message.startsWith('could not run')
          )
            throw error;
          return undefined;
        },
      );
      if (nc) {
        const jetstream = nc.info?.jetstream === true;
        await nc.close();
        if (jetstream) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** Kills the server if it runs (a crash), waits `downMs`, and starts it again on the same store. */
  async restart(downMs = 0): Promise<void> {
    await this.kill();
    if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
    await this.#launch();
    this.#restarts++;
  }

  /** Kills the server process (SIGKILL: a crash, not a shutdown) and waits for it to exit. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  /** Stops the server and removes its store. */
  async dispose(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
