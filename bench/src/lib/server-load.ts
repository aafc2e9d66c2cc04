/**
 * What an idle worker costs its server, isolated from other clients of the same server: the CPU time of
 * the PostgreSQL processes serving it (found by `application_name`), and the Redis commands it sends
 * (Redis does not account CPU per client, so round trips stand in for it).
 */
import { readFileSync } from 'node:fs';
import { PG_URL } from '../subjects/types.js';
import { sleep } from './run.js';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** CPU ticks (user + system) of a process, or undefined if it is gone or not readable. */
function cpuTicks(pid: number): number | undefined {
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
