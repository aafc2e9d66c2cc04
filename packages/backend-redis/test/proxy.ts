import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of the real Redis that can lose a reply: when armed with a marker (some bytes of a
 * request, e.g. a script's SHA), it forwards the request, lets the server execute it, then drops the
 * connection instead of passing the reply back. That is the "committed, but the client never heard"
 * failure a retry must not turn into a second commit. It also counts the requests that carry a marker
 * (how many times a script was called), as the server received them.
 */
export class ReplyDroppingProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #dropAfter: string | undefined;
  readonly #counts = new Map<string, number>();
  /** How many replies were dropped so far. */
  dropped = 0;

  private constructor(server: Server) {
    this.#server = server;
  }

  static async start(upstream: URL): Promise<ReplyDroppingProxy & { port: number }> {
    let proxy!: ReplyDroppingProxy;
    const server = createServer((client) => proxy.#pipe(client, upstream));
    proxy = new ReplyDroppingProxy(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return Object.assign(proxy, { port: (server.address() as { port: number }).port });
  }

  /** Drops the connection instead of the reply to the next request containing `marker`. */
  dropReplyTo(marker: string): void {
    this.#dropAfter = marker;
  }

  /** Counts, from now on, the requests that contain `marker` (e.g. a script's SHA). */
  count(marker: string): () => number {
    this.#counts.set(marker, 0);
    return () => this.#counts.get(marker) ?? 0;
  }

  #pipe(client: Socket, upstream: URL): void {
    const server = connect(Number(upstream.port || 6379), upstream.hostname);
    this.#sockets.add(client).add(server);
    let armed = false;
    // The end of the previous chunk, one byte shorter than a marker: a marker split across two chunks is
    // seen, and none is counted twice.
    let tail = '';
    client.on('data', (chunk: Buffer) => {
      if (this.#counts.size > 0) {
        const text = tail + chunk.toString('latin1');
        let longest = 0;
        for (const [marker, n] of this.#counts) {
          longest = Math.max(longest, marker.length);
          let found = 0;
          for (let i = text.indexOf(marker); i >= 0; i = text.indexOf(marker, i + marker.length)) found++;
          if (found > 0) this.#counts.set(marker, n + found);
        }
        tail = text.slice(Math.max(0, text.length - longest + 1));
      }
      if (this.#dropAfter !== undefined && chunk.includes(this.#dropAfter)) {
        this.#dropAfter = undefined;
        armed = true;
      }
      server.write(chunk);
    });
    server.on('data', (chunk) => {
      if (armed) {
        this.dropped++;
        client.destroy();
        server.destroy();
        return;
      }
      client.write(chunk);
    });
    const end = () => {
      client.destroy();
      server.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(server);
    };
    client.on('close', end).on('error', end);
    server.on('close', end).on('error', end);
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
