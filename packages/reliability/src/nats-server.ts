import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@duetime/conformance';

const BINARY = process.env.DUETIME_NATS_SERVER_BIN ?? 'nats-server';

/** A free TCP port on loopback. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * A JetStream server of the suite's own (its own port and store directory), so that it can be killed and
 * restarted without disturbing anyone else's tests on the shared server. Data survives restarts (file
 * storage in the same directory).
 */
export class PrivateNatsServer {
  #process: ChildProcess | undefined;
  readonly restarts = { count: 0 };

  private constructor(
    readonly port: number,
    readonly dir: string,
  ) {}

  static async start(): Promise<PrivateNatsServer> {
    const version = spawnSync(BINARY, ['--version'], { encoding: 'utf8' });
    if (version.status !== 0)
      throw new Error(
        `${BINARY} is not installed (the NATS outage run starts a private server); install it with \`bash scripts/services.sh up\` or set DUETIME_NATS_SERVER_BIN`,
      );
    const server = new PrivateNatsServer(await freePort(), mkdtempSync(join(tmpdir(), 'duetime-nats-')));
    await server.#launch();
    return server;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async #launch(): Promise<void> {
    this.#process = spawn(BINARY, ['-a', '127.0.0.1', '-p', String(this.port), '-js', '-sd', this.dir], {
      stdio: 'ignore',
    });
    await waitFor(`the private nats-server on port ${this.port}`, () => accepts(this.port), {
      timeoutMs: 30_000,
    });
  }

  /** Kills the server (SIGKILL: no clean shutdown), waits `downMs`, and starts it again on the same data. */
  async restart(downMs: number): Promise<void> {
    await this.kill();
    await new Promise((resolve) => setTimeout(resolve, downMs));
    await this.#launch();
    this.restarts.count++;
  }

  async kill(): Promise<void> {
    const child = this.#process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  async close(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
