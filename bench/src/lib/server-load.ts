/**
 * What a workload costs its server: the CPU time of the PostgreSQL processes serving a worker (found by
 * `application_name`), the Redis commands it sends (Redis does not account CPU per client, so round trips
 * stand in for it), and the CPU time of any set of processes on this machine (servers found by the port
 * they listen on, client processes by pid) and of the machine as a whole, read from `/proc`.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type { Client } from 'pg';
import { PG_URL } from '../subjects/types.js';
import { sleep } from './run.js';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** CPU ticks (user + system) of a process, or undefined if it is gone or not readable. */
export function cpuTicks(pid: number): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

export interface PgServerCpu {
  /** Stops sampling; resolves to the CPU seconds the server processes used, or undefined if not readable. */
  stop(): Promise<number | undefined>;
}

/**
 * Samples, every second, the server processes whose `application_name` is `applicationName` (same machine
 * only). Connections come and go (pools close idle ones), so each process counts from when it was first
 * seen to when it was last seen. The sampling connection has a name of its own, so it is not counted.
 */
export async function samplePgServerCpu(applicationName: string): Promise<PgServerCpu> {
  const { Client } = await import('pg');
  const client = new Client({ connectionString: PG_URL, application_name: `${applicationName}-sampler` });
  await client.connect();
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let readable = true;
  const sample = async () => {
    const { rows } = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
      [applicationName],
    );
    for (const { pid } of rows) {
      const ticks = cpuTicks(pid);
      if (ticks === undefined) {
        readable = false;
        continue;
      }
      if (!first.has(pid)) first.set(pid, ticks);
      last.set(pid, ticks);
    }
  };
  await sample();
  let sampling = true;
  const loop = (async () => {
    while (sampling) {
      await sleep(1000);
      await sample();
    }
  })();
  return {
    async stop() {
      sampling = false;
      await loop;
      await sample();
      await client.end();
      if (!readable || first.size === 0) return undefined;
      let ticks = 0;
      for (const [pid, end] of last) ticks += end - (first.get(pid) ?? end);
      return ticks / TICKS_PER_SECOND;
    },
  };
}

/**
 * Counts the commands this process sends through ioredis (duetime's Redis backend and BullMQ both use
 * it), by wrapping `Redis.prototype.sendCommand`. Measurement only: the commands go through unchanged.
 */
export async function countRedisCommands(): Promise<{ count(): number }> {
  const { Redis } = await import('ioredis');
  const proto = Redis.prototype as unknown as { sendCommand: (...args: unknown[]) => unknown };
  const original = proto.sendCommand;
  let sent = 0;
  proto.sendCommand = function (this: unknown, ...args: unknown[]) {
    sent++;
    return original.apply(this, args);
  };
  return { count: () => sent };
}

/**
 * The pids of the processes on this machine listening on any of the TCP `ports` (from `/proc/net/tcp` and
 * `tcp6`, then the socket links under `/proc/<pid>/fd`); empty where `/proc` cannot be read.
 */
export function listeningPids(ports: number[]): number[] {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local address is HEX_IP:HEX_PORT; state 0A is LISTEN; the inode is the tenth field.
      const port = Number.parseInt(fields[1]?.split(':')[1] ?? '', 16);
      if (fields[3] === '0A' && ports.includes(port) && fields[9]) inodes.add(fields[9]);
    }
  }
  if (inodes.size === 0) return [];
  const pids = new Set<number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const link = readlinkSync(`/proc/${entry}/fd/${fd}`);
        if (link.startsWith('socket:[') && inodes.has(link.slice(8, -1))) {
          pids.add(Number(entry));
          break;
        }
      } catch {
        // The descriptor closed meanwhile.
      }
    }
  }
  return [...pids].sort((a, b) => a - b);
}

/** The ports of `urls` (`redis://127.0.0.1:7001` → 7001), with `fallback` where a URL names none. */
export function portsOf(urls: string[], fallback: number): number[] {
  return urls.map((url) => Number(new URL(url).port || fallback));
}

/** Busy and total CPU ticks of the whole machine, summed over its cores (`/proc/stat`). */
function machineTicks(): { busy: number; total: number } | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user).
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line
      .trim()
      .split(/\s+/)
      .slice(1, 9)
      .map(Number);
    const busy = user! + nice! + system! + irq! + softirq! + steal!;
    return { busy, total: busy + idle! + iowait! };
  } catch {
    return undefined;
  }
}

export interface CpuSample {
  /** CPU seconds the processes used between start and stop (undefined: none found, or not readable). */
  seconds: number | undefined;
  /** The processes counted. */
  pids: number[];
}

/**
 * Samples the CPU time of the processes `pids()` names, every `intervalMs`, until `stop()`. A process named
 * at the start counts from its ticks then; one first named later (a connection opened meanwhile) counts
 * from its start, since it was born during the sampling; one that exits counts to its last sample.
 */
export function sampleCpu(
  pids: () => number[] | Promise<number[]>,
  intervalMs = 250,
): { ready: Promise<void>; stop(): Promise<CpuSample> } {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let initial = true;
  const sample = async () => {
    for (const pid of await pids()) {
      // Gone already (a connection closed since it was listed), or not readable: not counted.
      const ticks = cpuTicks(pid);
      if (ticks === undefined) continue;
      if (!first.has(pid)) first.set(pid, initial ? ticks : 0);
      last.set(pid, ticks);
    }
    initial = false;
  };
  const ready = sample();
  let sampling = true;
  const loop = (async () => {
    await ready;
    while (sampling) {
      await sleep(intervalMs);
      if (sampling) await sample();
    }
  })();
  return {
    ready,
    async stop() {
      sampling = false;
      await loop;
      await sample();
      if (first.size === 0) return { seconds: undefined, pids: [] };
      let ticks = 0;
      for (const [pid, end] of last) ticks += end - (first.get(pid) ?? end);
      return { seconds: ticks / TICKS_PER_SECOND, pids: [...first.keys()] };
    },
  };
}

/**
 * Starts measuring the whole machine's CPU (every process, other users' included); `stop()` returns the
 * CPU seconds used since, summed over the cores (2 on a fully busy 2-core machine per second), or undefined
 * where `/proc/stat` cannot be read.
 */
export function sampleMachineCpu(): { stop(): number | undefined } {
  const start = machineTicks();
  return {
    stop() {
      const end = machineTicks();
      if (!start || !end) return undefined;
      return (end.busy - start.busy) / TICKS_PER_SECOND;
    },
  };
}

/**
 * The pids of the PostgreSQL processes serving connections named `applicationName`, and of the server's
 * background processes (WAL writer, checkpointer, background writer, autovacuum), which do the work those
 * connections' commits cause (for every client of the server), asked through `client`.
 */
export async function pgServerPids(client: Client, applicationName: string): Promise<number[]> {
  const { rows } = await client.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = $1 OR backend_type <> 'client backend'",
    [applicationName],
  );
  return rows.map((r) => r.pid);
}
