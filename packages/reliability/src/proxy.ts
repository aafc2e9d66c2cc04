import { connect, createServer, type Server, type Socket } from 'node:net';

/** What the proxy does to traffic now. */
export type ProxyMode = 'pass' | 'blackhole' | 'refuse';

interface Chunk {
  data: Buffer;
  due: number;
}

/** One direction of one connection: chunks wait here until their latency has passed and traffic flows. */
class Lane {
  readonly #queue: Chunk[] = [];
  #timer: NodeJS.Timeout | undefined;
  #lastDue = 0;

  constructor(
    readonly to: () => Socket | undefined,
    readonly proxy: FaultProxy,
  ) {}

  push(data: Buffer): void {
    const due = Math.max(Date.now() + this.proxy.latency, this.#lastDue);
    this.#lastDue = due;
    this.#queue.push({ data, due });
    this.pump();
  }

  pump(): void {
    if (this.#timer) return;
    const target = this.to();
    while (this.#queue.length > 0 && target && this.proxy.mode === 'pass') {
      const head = this.#queue[0] as Chunk;
      const wait = head.due - Date.now();
      if (wait > 0) {
        this.#timer = setTimeout(() => {
          this.#timer = undefined;
          this.pump();
        }, wait);
        return;
      }
      this.#queue.shift();
      target.write(head.data);
    }
  }

  clear(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#queue.length = 0;
  }
}

interface Pair {
  client: Socket;
  upstream: Socket | undefined;
  toUpstream: Lane;
  toClient: Lane;
  closed: boolean;
}

/**
 * A fault-injecting TCP proxy on loopback, in front of one server. Tests point a backend at it and then
 * cut every connection at once (`dropAll`), stop all traffic without closing anything (`blackhole`: bytes
 * wait, as packets would be retransmitted, until `heal`), refuse new connections (`refuse`, a server
 * that is down), or delay every chunk in both directions (`latency`).
 */
export class FaultProxy {
  readonly #server: Server;
  readonly #pairs = new Set<Pair>();
  readonly #upstream: { host: string; port: number };
  mode: ProxyMode = 'pass';
  /** Milliseconds added to every chunk, in both directions. */
  latency = 0;
  /** Connections accepted and cut, for the figures. */
  readonly stats = { accepted: 0, dropped: 0, refused: 0 };
  port = 0;

  private constructor(upstream: { host: string; port: number }) {
    this.#upstream = upstream;
    this.#server = createServer((client) => this.#accept(client));
  }

  /** Starts a proxy on 127.0.0.1 (a free port) in front of `upstream`. */
  static async start(upstream: { host: string; port: number }): Promise<FaultProxy> {
    const proxy = new FaultProxy(upstream);
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once('error', reject);
      proxy.#server.listen(0, '127.0.0.1', () => resolve());
    });
    proxy.port = (proxy.#server.address() as { port: number }).port;
    return proxy;
  }

  /** Open client connections. */
  get connections(): number {
    return this.#pairs.size;
  }

  /** Destroys every open connection, both sides, now; returns how many. New connections are accepted. */
  dropAll(): number {
    const count = this.#pairs.size;
    for (const pair of [...this.#pairs]) this.#close(pair);
    this.stats.dropped += count;
    return count;
  }

  /** Stops every byte in both directions, keeping connections open, until {@link heal}. */
  blackhole(): void {
    this.mode = 'blackhole';
  }

  /** Closes new connections at once (as a server that is down); open ones keep working. */
  refuse(): void {
    this.mode = 'refuse';
  }

  /** Back to passing traffic (with the current latency); what waited flows now. */
  heal(): void {
    this.mode = 'pass';
    for (const pair of this.#pairs) {
      if (!pair.upstream) this.#connectUpstream(pair);
      pair.toUpstream.pump();
      pair.toClient.pump();
    }
  }

  async close(): Promise<void> {
    for (const pair of [...this.#pairs]) this.#close(pair);
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket): void {
    if (this.mode === 'refuse') {
      this.stats.refused++;
      client.destroy();
      return;
    }
    this.stats.accepted++;
    client.setNoDelay(true);
    const pair: Pair = {
      client,
      upstream: undefined,
      toUpstream: new Lane(() => pair.upstream, this),
      toClient: new Lane(() => pair.client, this),
      closed: false,
    };
    this.#pairs.add(pair);
    client.on('data', (data: Buffer) => pair.toUpstream.push(data));
    client.on('error', () => this.#close(pair));
    client.on('close', () => this.#close(pair));
    // In a blackhole the connection is accepted but goes nowhere until the network heals.
    if (this.mode === 'pass') this.#connectUpstream(pair);
  }

  #connectUpstream(pair: Pair): void {
    if (pair.closed) return;
    const upstream = connect(this.#upstream.port, this.#upstream.host);
    upstream.setNoDelay(true);
    pair.upstream = upstream;
    upstream.on('connect', () => pair.toUpstream.pump());
    upstream.on('data', (data: Buffer) => pair.toClient.push(data));
    upstream.on('error', () => this.#close(pair));
    upstream.on('close', () => this.#close(pair));
  }

  #close(pair: Pair): void {
    if (pair.closed) return;
    pair.closed = true;
    this.#pairs.delete(pair);
    pair.toUpstream.clear();
    pair.toClient.clear();
    pair.client.destroy();
    pair.upstream?.destroy();
  }
}
