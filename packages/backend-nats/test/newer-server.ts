import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { connectNats, serverVersion, versionAtLeast } from '../src/index.js';
import { NATS_NEW_URL } from './adapter-new.js';

/** Where `scripts/services.sh` records whether it could provide the newer server, and why not. */
function statusFile(): string {
  const cache =
    process.env.DUETIME_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'duetime');
  return join(cache, 'nats-new.status');
}

/**
 * Whether a NATS server >= 2.12 answers at DUETIME_NATS_NEW_URL; when it does not, the reason (from the
 * services script's status file when there is one).
 */
export async function newerServer(): Promise<
  { available: true; version: string } | { available: false; reason: string }
> {
  let recorded: string | undefined;
  try {
    recorded = readFileSync(statusFile(), 'utf8').trim();
  } catch {
    recorded = undefined;
  }
  try {
    const nc = await connectNats(NATS_NEW_URL, { connectTimeoutMs: 2000, maxReconnectAttempts: 0 });
    try {
      const version = serverVersion(nc);
      if (!versionAtLeast(version, 2, 12))
        return {
          available: false,
          reason: `${NATS_NEW_URL} runs nats-server ${version.text}, older than 2.12`,
        };
      if (nc.info?.jetstream !== true)
        return { available: false, reason: `${NATS_NEW_URL} runs without JetStream` };
      return { available: true, version: version.text };
    } finally {
      await nc.close();
    }
  } catch (error) {
    const why = recorded?.startsWith('unavailable ')
      ? recorded.slice('unavailable '.length)
      : `no answer at ${NATS_NEW_URL} (${error instanceof Error ? error.message : String(error)})`;
    return { available: false, reason: `${why}; run 'bash scripts/services.sh up' to provide it` };
  }
}
