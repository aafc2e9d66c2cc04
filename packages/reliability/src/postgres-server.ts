import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@duetime/testing';

/** The directory of PostgreSQL's server binaries: DUETIME_PG_BIN_DIR, else the newest under /usr/lib/postgresql. */
function binDir(): string {
  const given = process.env.DUETIME_PG_BIN_DIR;
  if (given) return given;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', 'postgres')))
        .sort((a, b) => Number(a) - Number(b))
    : [];
  const newest = versions.at(-1);
  if (!newest)
    throw new Error(
      `no PostgreSQL server binaries under ${root} (install PostgreSQL: bash scripts/services.sh up), or set DUETIME_PG_BIN_DIR`,
    );
  return join(root, newest, 'bin');
}

/** The pids of the processes whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // pid (comm) state ppid ...: the command may hold spaces and parentheses, the fields after it not.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return children;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A PostgreSQL server of the test's own (never the shared one): `initdb` into a temporary directory and
 * `postgres` on a free loopback port, with the defaults that decide durability (`fsync` and
 * `synchronous_commit` on). As root it runs as the `postgres` user (initdb refuses root). {@link kill} is
 * the crash of the whole server: the postmaster is stopped (SIGSTOP, so it forks nothing more), every
 * process it forked (backends, each in a session of its own, and background workers) gets SIGKILL, then
 * the postmaster: no process finishes anything, no shutdown checkpoint. {@link restart} starts it again on
 * the same data directory, which replays its write-ahead log.
 */
export class PrivatePostgresServer {
  readonly port: number;
  readonly url: string;
  readonly #dir: string;
  readonly #bin: string;
  readonly #user: { uid: number; gid: number } | undefined;
  #child: ChildProcess | undefined;

  private constructor(
    port: number,
    dir: string,
    bin: string,
    user: { uid: number; gid: number } | undefined,
  ) {
    this.port = port;
    this.#dir = dir;
    this.#bin = bin;
    this.#user = user;
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }

  static async start(): Promise<PrivatePostgresServer> {
    const bin = binDir();
    const dir = mkdtempSync(join(tmpdir(), 'duetime-pg-'));
    let user: { uid: number; gid: number } | undefined;
    if (process.getuid?.() === 0) {
      const id = (flag: string) =>
        Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
      user = { uid: id('-u'), gid: id('-g') };
      chownSync(dir, user.uid, user.gid);
    }
    const server = new PrivatePostgresServer(await freePort(), dir, bin, user);
    try {
      execFileSync(
        join(bin, 'initdb'),
        ['-D', join(dir, 'data'), '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8'],
        { stdio: 'ignore', ...(user ?? {}) },
      );
      await server.#launch();
    } catch (error) {
      await server.dispose();
      throw new Error(`could not start a private PostgreSQL server from ${bin}: ${(error as Error).message}`);
    }
    return server;
  }

  /** SIGKILL to the server and every process it forked (a crash); waits until all are gone. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child?.pid) return;
    const postmaster = child.pid;
    const signal = (pid: number, name: NodeJS.Signals) => {
      try {
        process.kill(pid, name);
      } catch {
        // already gone
      }
    };
    signal(postmaster, 'SIGSTOP');
    const processes = [...childrenOf(postmaster), postmaster];
    for (const pid of processes) signal(pid, 'SIGKILL');
    const deadline = Date.now() + 10_000;
    while (processes.some(alive)) {
      if (Date.now() > deadline)
        throw new Error(`PostgreSQL processes outlived SIGKILL: ${processes.filter(alive)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    this.#child = undefined;
  }

  /** Starts the server again on its data directory (crash recovery) and waits until it accepts queries. */
  async restart(): Promise<void> {
    if (this.#child) return;
    await this.#launch();
  }

  /** Kills the server and removes its data directory. */
  async dispose(): Promise<void> {
    await this.kill().catch(() => {});
    rmSync(this.#dir, { recursive: true, force: true });
  }

  async #launch(): Promise<void> {
    const child = spawn(
      join(this.#bin, 'postgres'),
      [
        '-D',
        join(this.#dir, 'data'),
        '-p',
        String(this.port),
        '-k',
        this.#dir,
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'max_connections=200',
      ],
      { stdio: 'ignore', ...(this.#user ?? {}) },
    );
    this.#child = child;
    const { default: pg } = await import('pg');
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`postgres exited with ${child.exitCode} on start`);
      const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 1000 });
      client.on('error', () => {});
      try {
        await client.connect();
        await client.query('SELECT 1');
        return;
      } catch (error) {
        if (Date.now() > deadline)
          throw new Error(`PostgreSQL on port ${this.port} did not accept queries within 60 s: ${error}`);
      } finally {
        await client.end().catch(() => {});
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
