import { runConformance } from '@duetime/conformance';
import { afterAll, describe } from 'vitest';
import { deleteOpened } from './adapter.js';
import { open } from './adapter-new.js';
import { newerServer } from './newer-server.js';

// The same suite against a NATS server >= 2.12. That server is optional: where it cannot be had, this run
// reports itself as not run, with the reason, instead of failing.
const server = await newerServer();
if (!server.available) console.log(`conformance on NATS >= 2.12 not run: ${server.reason}`);

describe.skipIf(!server.available)(
  `NATS ${server.available ? server.version : '>= 2.12 (not available)'}`,
  () => {
    runConformance({ name: 'nats-newer', open, module: new URL('./adapter-new.ts', import.meta.url) });
    afterAll(deleteOpened, 60_000);
  },
);
