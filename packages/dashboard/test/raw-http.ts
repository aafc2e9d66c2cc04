import { connect, type Socket } from 'node:net';

/** An HTTP answer read off a raw socket. */
export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** Whether the server closed the connection after the answer. */
  closed: boolean;
}

/**
 * Sends `head` (request line and headers, without the blank line) and `body` as they are, over a fresh
 * connection, and reads the first answer. fetch() would not send every header (`Origin`, `Sec-Fetch-Site`,
 * `Host`) as given, nor a body shorter than its `Content-Length`.
 */
export function rawRequest(
  url: string,
  head: string[],
  body = '',
  options: { endAfterBody?: boolean } = {},
): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let received = '';
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      const answer = parseAnswer(received, closed);
      if (!answer) return;
      settled = true;
      resolve(answer);
      socket.destroy();
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      finish(false);
    });
    socket.on('close', () => {
      finish(true);
      if (!settled)
        reject(new Error(`the connection closed without an answer (read ${received.length} bytes)`));
    });
    socket.on('error', () => undefined);
    socket.write(`${head.join('\r\n')}\r\n\r\n${body}`);
    if (options.endAfterBody) socket.end();
  });
}

function parseAnswer(text: string, closed: boolean): RawAnswer | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = text.slice(end + 4);
  const length = Number(headers['content-length'] ?? Number.NaN);
  if (!closed && Number.isFinite(length) && Buffer.byteLength(body) < length) return undefined;
  return {
    status: Number(statusLine.split(' ')[1]),
    headers,
    body,
    closed: closed || headers.connection === 'close',
  };
}

/** A connection that sends `text` and then nothing more; resolves with what it read when the server closes it. */
export function stalledConnection(
  url: string,
  text: string,
): { socket: Socket; closed: Promise<{ received: string; afterMs: number }> } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  const started = performance.now();
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    received += chunk;
  });
  socket.on('error', () => undefined);
  if (text) socket.write(text);
  const closed = new Promise<{ received: string; afterMs: number }>((resolve) =>
    socket.on('close', () => resolve({ received, afterMs: performance.now() - started })),
  );
  return { socket, closed };
}
