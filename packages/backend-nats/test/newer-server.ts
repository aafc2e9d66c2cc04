import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * A nats-server binary >= 2.12 for tests that run a private server (the store needs it): the one
 * `bash scripts/services.sh up` fetched into its cache, or DUETIME_NATS_SERVER_BIN.
 */
export function newerServerBinary(): string {
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
