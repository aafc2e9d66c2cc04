import type pg from 'pg';

// Statements sent in one turn of the event loop go out in one write.
//
// On a pipelined node-postgres connection every statement is written the moment it is sent: one system
// call and, on a quiet network, one packet each, which the server then reads one by one. A delivery batch
// whose processors run at once sends a statement per processor in the same turn (and, once their answers
// arrive together, the next statement of each). Here the connection's socket is corked when the first
// statement of a turn is sent and uncorked when the turn's synchronous work and promise jobs are done
// (process.nextTick runs after them), so the turn's statements leave in one write. Nothing waits longer
// than that turn; the order of statements is the order they were sent.

interface CorkableSocket {
  cork(): void;
  uncork(): void;
}

/** Clients already coalescing (a pooled client is checked out many times). */
const coalescing = new WeakSet<object>();

/**
 * Makes a pipelined node-postgres client (`pipeline: true`) write the statements of one event-loop turn
 * together. A client that does not pipeline is left as it is: it sends a statement only once the one
 * before it is answered, so there is nothing to put together.
 */
export function coalesceWrites(client: pg.ClientBase): void {
  const c = client as unknown as {
    pipeline?: unknown;
    query: (...args: unknown[]) => unknown;
    connection?: { stream?: Partial<CorkableSocket> };
  };
  if (c.pipeline !== true || coalescing.has(c)) return;
  coalescing.add(c);
  const send = c.query;
  let corked: CorkableSocket | undefined;
  const uncork = () => {
    const socket = corked;
    corked = undefined;
    socket?.uncork();
  };
  c.query = function query(this: unknown, ...args: unknown[]) {
    const socket = c.connection?.stream;
    if (corked === undefined && typeof socket?.cork === 'function' && typeof socket.uncork === 'function') {
      corked = socket as CorkableSocket;
      corked.cork();
      process.nextTick(uncork);
    }
    return send.apply(this, args);
  };
}
