import { connect, createServer, type Server, type Socket } from 'node:net';
import { waitFor } from '@duetime/conformance';
import { afterEach, describe, expect, it } from 'vitest';
import { FaultProxy } from '../src/proxy.js';

/** The fault-injecting proxy against a local echo server. */
let server: Server | undefined;
let proxy: FaultProxy | undefined;
const clients: Socket[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await proxy?.close();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
  proxy = undefined;
});

async function echoThroughProxy(): Promise<FaultProxy> {
  server = createServer((socket) => socket.on('data', (d) => socket.write(d)).on('error', () => {}));
  await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as { port: number }).port;
  proxy = await FaultProxy.start({ host: '127.0.0.1', port });
  return proxy;
}

function client(p: FaultProxy): { socket: Socket; received: () => string; closed: () => boolean } {
  const socket = connect(p.port, '127.0.0.1');
  clients.push(socket);
  let data = '';
  let closed = false;
  socket.setEncoding('utf8').on('data', (d: string) => {
    data += d;
  });
  socket.on('close', () => {
    closed = true;
  });
  socket.on('error', () => {});
  return { socket, received: () => data, closed: () => closed };
}

describe('FaultProxy', () => {
  it('passes bytes both ways, in order', async () => {
    const p = await echoThroughProxy();
    const c = client(p);
    for (let i = 0; i < 50; i++) c.socket.write(`${i},`);
    const expected = Array.from({ length: 50 }, (_, i) => `${i},`).join('');
    await waitFor('the echo', () => c.received() === expected);
  });

  it('delays every chunk by the latency, keeping order', async () => {
    const p = await echoThroughProxy();
    const c = client(p);
    c.socket.write('a');
    await waitFor('the first echo', () => c.received() === 'a');
    p.latency = 200;
    const sent = Date.now();
    c.socket.write('b');
    c.socket.write('c');
    await waitFor('the delayed echo', () => c.received() === 'abc');
    // Two hops (there and back) of at least the latency each.
    expect(Date.now() - sent).toBeGreaterThanOrEqual(400);
  });

  it('holds every byte in a blackhole, connections open, and delivers them when healed', async () => {
    const p = await echoThroughProxy();
    const c = client(p);
    c.socket.write('x');
    await waitFor('the first echo', () => c.received() === 'x');
    p.blackhole();
    c.socket.write('y');
    const late = client(p);
    late.socket.write('z');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(c.received()).toBe('x');
    expect(late.received()).toBe('');
    expect(c.closed() || late.closed()).toBe(false);
    p.heal();
    await waitFor('the held bytes', () => c.received() === 'xy' && late.received() === 'z');
  });

  it('cuts every connection at once, and refuses new ones while down', async () => {
    const p = await echoThroughProxy();
    const a = client(p);
    const b = client(p);
    a.socket.write('1');
    b.socket.write('2');
    await waitFor('both connected', () => a.received() === '1' && b.received() === '2');
    expect(p.dropAll()).toBe(2);
    await waitFor('both closed', () => a.closed() && b.closed());
    p.refuse();
    const refused = client(p);
    await waitFor('the refused connection to close', () => refused.closed());
    expect(p.stats.refused).toBe(1);
    p.heal();
    const after = client(p);
    after.socket.write('3');
    await waitFor('a new connection after healing', () => after.received() === '3');
  });
});
