import { connect, createServer, type Server, type Socket } from 'node:net';

interface Pair {
  client: Socket;
  upstream: Socket;
  /** Bytes held while stalled, per direction. */
  toUpstream: Buffer[];
  toClient: Buffer[];
}

/**
 * A TCP proxy on loopback in front of one NATS server whose traffic can be stalled: `stall()` holds every
 * byte in both directions, connections staying open (a network partition, or a process the network
 * cannot reach, as the client sees it), and `flow()` delivers what was held, in order, and passes traffic
 * again. The client behind it keeps its connection and learns nothing but silence.
 */
export class StallProxy {
  readonly #server: Server;
  readonly #pairs = new Set<Pair>();
  #stalled = false;
  port = 0;

  private constructor(upstreamPort: number) {
    this.#server = createServer((client) => {
      client.setNoDelay(true);
      const upstream = connect(upstreamPort, '127.0.0.1');
      upstream.setNoDelay(true);
      const pair: Pair = { client, upstream, toUpstream: [], toClient: [] };
      this.#pairs.add(pair);
      client.on('data', (data: Buffer) => this.#send(data, pair.upstream, pair.toUpstream));
      upstream.on('data', (data: Buffer) => this.#send(data, pair.client, pair.toClient));
      const close = () => {
        this.#pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      for (const socket of [client, upstream]) {
        socket.on('error', close);
        socket.on('close', close);
      }
    });
  }

  static async start(upstreamUrl: string): Promise<StallProxy> {
    const proxy = new StallProxy(Number(new URL(upstreamUrl).port));
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once('error', reject);
      proxy.#server.listen(0, '127.0.0.1', () => resolve());
    });
    proxy.port = (proxy.#server.address() as { port: number }).port;
    return proxy;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  get stalled(): boolean {
    return this.#stalled;
  }

  /** Holds every byte, both ways, until {@link flow}. */
  stall(): void {
    this.#stalled = true;
  }

  /** Delivers what was held and passes traffic again. */
  flow(): void {
    this.#stalled = false;
    for (const pair of this.#pairs) {
      for (const data of pair.toUpstream.splice(0)) pair.upstream.write(data);
      for (const data of pair.toClient.splice(0)) pair.client.write(data);
    }
  }

  async close(): Promise<void> {
    for (const pair of this.#pairs) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    this.#pairs.clear();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #send(data: Buffer, to: Socket, held: Buffer[]): void {
    if (this.#stalled || held.length > 0) held.push(data);
    else to.write(data);
  }
}
