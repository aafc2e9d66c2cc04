import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { JetStreamScheduler } from '../../src/jetstream-scheduler/index.js';
import { Collector } from './collector.js';
import { waitFor } from './helpers.js';

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

/** A private JetStream server this test may kill and restart (its own port and store directory). */
class PrivateServer {
  process: ChildProcess | undefined;
  constructor(
    readonly port: number,
    readonly dir: string,
  ) {}

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.process = spawn(BINARY, ['-a', '127.0.0.1', '-p', String(this.port), '-js', '-sd', this.dir], {
      stdio: 'ignore',
    });
    await waitFor(`nats-server on port ${this.port}`, async () => {
      try {
        const nc = await connect({ servers: this.url, reconnect: false, timeout: 500 });
        await nc.close();
        return true;
      } catch {
        return false;
      }
    });
  }

  async kill(): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }
}

describe('JetStream scheduler across a server crash (private NATS 2.9 server)', () => {
  let server: PrivateServer | undefined;
  let nc: NatsConnection | undefined;
  let scheduler: JetStreamScheduler | undefined;
  let collector: Collector | undefined;

  afterEach(async () => {
    await collector?.stop();
    await scheduler?.close();
    await nc?.close();
    await server?.kill();
    if (server) rmSync(server.dir, { recursive: true, force: true });
  });

  it('keeps firing after the server is killed and restarted: nothing lost, nothing fired twice', async () => {
    const version = spawnSync(BINARY, ['--version'], { encoding: 'utf8' });
    if (version.status !== 0)
      throw new Error(
        `${BINARY} is not installed (needed to run a private NATS server); install it with \`bash scripts/services.sh up\` or set DUETIME_NATS_SERVER_BIN`,
      );
    server = new PrivateServer(await freePort(), mkdtempSync(join(tmpdir(), 'duetime-nats-')));
    await server.start();
    nc = await connect({ servers: server.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    scheduler = new JetStreamScheduler(nc, { prefix: 'restart', mode: 'emulated', leaseTtl: 1_000 });
    await scheduler.ensureStream();
    collector = await Collector.start(scheduler, 'restart', 5, () => undefined, { retryDelay: 50 });

    const start = Date.now();
    const timers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => scheduler?.at(`job/${i}`, new Date(start + 300 + i * 100), i)),
    );
    await waitFor('the first timers', () => (collector?.calls.length ?? 0) >= 5);
    await server.kill();
    await server.start();

    const expected = timers.map((t) => `once:${t?.timer}`);
    await waitFor(
      'every timer after the restart',
      () => expected.every((id) => collector?.firedIds().includes(id)),
      30_000,
    );
    const sequences = new Map<string, Set<number>>();
    for (const call of collector.calls) {
      const set = sequences.get(call.firedId) ?? new Set<number>();
      set.add(call.info.streamSequence);
      sequences.set(call.firedId, set);
    }
    for (const id of expected) expect(sequences.get(id)?.size, id).toBe(1);
  });
});
