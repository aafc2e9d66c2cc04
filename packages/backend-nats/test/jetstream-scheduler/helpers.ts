import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamScheduler, type JetStreamSchedulerOptions } from '../../src/jetstream-scheduler/index.js';

/** The shared NATS (2.9.10 on the project's machines). */
export const OLD_URL = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
/** The NATS >= 2.12 that `scripts/services.sh up` provides when it can. */
export const NEW_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';

/** Connects to the required server, failing with a message that names the service and how to start it. */
export async function connectRequired(url = OLD_URL): Promise<NatsConnection> {
  try {
    return await connect({ servers: url, timeout: 3_000, maxReconnectAttempts: -1 });
  } catch (error) {
    throw new Error(
      `NATS with JetStream is not answering at ${url} (${(error as Error).message}); start it with \`bash scripts/services.sh up\` or set DUETIME_NATS_URL`,
    );
  }
}

/**
 * Whether the newer server answers, and why not when it does not. Tests that need it report themselves as
 * not run with this reason (the server is optional: `scripts/services.sh up` provides it where it can).
 */
export const newServer: { available: boolean; reason: string } = await probeNewServer();

async function probeNewServer(): Promise<{ available: boolean; reason: string }> {
  try {
    const nc = await connect({ servers: NEW_URL, timeout: 2_000, reconnect: false });
    const version = nc.info?.version ?? '?';
    await nc.close();
    const [major = 0, minor = 0] = version.split('.').map(Number);
    if (major < 2 || (major === 2 && minor < 12))
      return { available: false, reason: `${NEW_URL} runs nats-server ${version}, older than 2.12` };
    return { available: true, reason: '' };
  } catch (error) {
    let status = '';
    try {
      const dir =
        process.env.DUETIME_CACHE_DIR ??
        join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'duetime');
      status = ` (services.sh: ${readFileSync(join(dir, 'nats-new.status'), 'utf8').trim()})`;
    } catch {}
    return {
      available: false,
      reason: `no NATS >= 2.12 at ${NEW_URL}: ${(error as Error).message}${status}; run \`bash scripts/services.sh up\``,
    };
  }
}

/** Prints why a group of tests did not run (vitest shows them as skipped). */
export function reportNotRun(what: string, reason: string): void {
  console.warn(`[not run] ${what}: ${reason}`);
}

/** A prefix no other test uses. */
export function uniquePrefix(tag: string): string {
  return `t${tag}${randomBytes(4).toString('hex')}`;
}

/** Polls `check` until it returns a truthy value or `deadlineMs` passes (then throws with `what`). */
export async function waitFor<T>(what: string, check: () => T | Promise<T>, deadlineMs = 15_000): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** One way of running the scheduler under test. */
export interface ModeCase {
  name: string;
  url: string;
  options: JetStreamSchedulerOptions;
  expectMode: 'native' | 'emulated';
  needsNew: boolean;
}

export const MODE_CASES: ModeCase[] = [
  { name: 'emulated on NATS 2.9', url: OLD_URL, options: {}, expectMode: 'emulated', needsNew: false },
  { name: 'native on NATS >= 2.12', url: NEW_URL, options: {}, expectMode: 'native', needsNew: true },
  {
    name: 'emulated forced on NATS >= 2.12',
    url: NEW_URL,
    options: { mode: 'emulated' },
    expectMode: 'emulated',
    needsNew: true,
  },
];

/** Creates schedulers on fresh prefixes and removes their streams afterwards. */
export class Harness {
  readonly #nc: NatsConnection;
  readonly #made: JetStreamScheduler[] = [];
  readonly #streams = new Set<string>();

  constructor(nc: NatsConnection) {
    this.#nc = nc;
  }

  get connection(): NatsConnection {
    return this.#nc;
  }

  scheduler(options: JetStreamSchedulerOptions = {}): JetStreamScheduler {
    const scheduler = new JetStreamScheduler(this.#nc, {
      prefix: uniquePrefix('s'),
      leaseTtl: 1_000,
      duplicateWindow: 30_000,
      ...options,
    });
    this.#made.push(scheduler);
    this.#streams.add(scheduler.stream);
    return scheduler;
  }

  async cleanup(): Promise<void> {
    await Promise.allSettled(this.#made.map((s) => s.close()));
    this.#made.length = 0;
    const jsm = await jetstreamManager(this.#nc);
    await Promise.allSettled([...this.#streams].map((name) => jsm.streams.delete(name)));
    this.#streams.clear();
  }
}

/** Everything a test consumer saw. */
export interface Seen {
  key: string;
  payload: unknown;
  firedId: string;
  deliveries: number;
  at: number;
}
