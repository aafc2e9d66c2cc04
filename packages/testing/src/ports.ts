import { createServer, type Server } from 'node:net';

/** `count` distinct loopback TCP ports nobody listens on right now (held together while chosen). */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolve);
      });
      servers.push(server);
    }
    return servers.map((s) => (s.address() as { port: number }).port);
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

/** One loopback TCP port nobody listens on right now. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}
