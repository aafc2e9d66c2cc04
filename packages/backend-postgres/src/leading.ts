import type pg from 'pg';

// Transaction control that rides with the application's next statement.
//
// A unit's BEGIN and a delivery part's SAVEPOINT wait for the first statement that needs them. Sent as a
// query of their own, each costs a round trip: node-postgres writes a query only once the one before it
// is answered. Here they go out in the same write as that statement, under its Sync: Parse, Bind and
// Execute of each control statement, then the statement's own messages, then one Sync. The server runs
// them in order and answers once; an error in any of them skips the rest, so the statement never runs
// outside its transaction or its savepoint.

/** Statements to run ahead of the next one, and who hears whether they went through. */
export interface Lead {
  /** Transaction control without parameters, one statement each (BEGIN, SAVEPOINT, RELEASE SAVEPOINT). */
  readonly statements: readonly string[];
  /** Called when a lead statement failed (the statement behind them then did not run). */
  failed(error: unknown): void;
}

/** What a node-postgres connection offers for writing protocol messages (pg 8). */
interface WireConnection {
  parse(query: { text: string; name?: string; types?: unknown[] }): void;
  bind(config: { portal?: string; statement?: string; values?: unknown[] }): void;
  execute(config: { portal?: string; rows?: number }): void;
  stream: { cork?: () => void; uncork?: () => void };
}

/** The part of node-postgres's Query class the leading query builds on. */
interface PgQuery {
  name?: string;
  rows?: number;
  callback?: (error: Error | null, result?: unknown) => void;
  requiresPreparation(): boolean;
  submit(connection: WireConnection): Error | null;
  handleCommandComplete(message: unknown, connection: WireConnection): void;
  handleError(error: Error, connection: WireConnection): void;
}

type QueryClass = new (...args: unknown[]) => PgQuery;

/** The leading-query class of each node-postgres Query class met (an application may bring its own copy). */
const classes = new WeakMap<QueryClass, new (...args: unknown[]) => LeadingQuery>();

interface LeadingQuery extends PgQuery {
  lead: Lead | undefined;
  /** Lead statements whose answers are still to come. */
  pending: number;
}

function leadingClass(Query: QueryClass): new (...args: unknown[]) => LeadingQuery {
  let Leading = classes.get(Query);
  if (Leading) return Leading;
  Leading = class extends Query implements LeadingQuery {
    lead: Lead | undefined;
    pending = 0;

    override submit(connection: WireConnection): Error | null {
      const statements = this.lead?.statements ?? [];
      connection.stream.cork?.();
      try {
        for (const text of statements) {
          connection.parse({ text, name: '', types: [] });
          connection.bind({ portal: '', statement: '', values: [] });
          connection.execute({ portal: '', rows: 0 });
        }
        this.pending = statements.length;
        return super.submit(connection);
      } finally {
        connection.stream.uncork?.();
      }
    }

    override handleCommandComplete(message: unknown, connection: WireConnection): void {
      if (this.pending > 0) {
        this.pending--;
        return;
      }
      super.handleCommandComplete(message, connection);
    }

    override handleError(error: Error, connection: WireConnection): void {
      if (this.pending > 0) {
        this.pending = 0;
        this.lead?.failed(error);
      }
      super.handleError(error, connection);
    }
  };
  classes.set(Query, Leading);
  return Leading;
}

/**
 * Sends `args` (the arguments of `client.query`) with `lead` ahead of it in one round trip, when the
 * client and the query allow it: a node-postgres client (not pipelined, not native) and a statement sent
 * with the extended protocol (it has parameters), unnamed, not paged. Returns what `client.query` would
 * (a promise, or undefined with a callback), or `undefined` with `sent` false when it cannot, and then
 * nothing was sent.
 */
export function queryWithLead(
  client: pg.ClientBase,
  args: readonly unknown[],
  lead: Lead,
): { sent: boolean; result?: unknown } {
  const c = client as unknown as {
    connection?: Partial<WireConnection>;
    pipeline?: unknown;
    constructor: { Query?: unknown };
  };
  const Query = c.constructor.Query;
  const connection = c.connection;
  if (
    typeof Query !== 'function' ||
    c.pipeline === true ||
    typeof connection?.parse !== 'function' ||
    typeof connection.bind !== 'function' ||
    typeof connection.execute !== 'function' ||
    typeof (args[0] as { submit?: unknown } | undefined)?.submit === 'function'
  )
    return { sent: false };
  let query: LeadingQuery;
  try {
    query = new (leadingClass(Query as QueryClass))(...args);
  } catch {
    return { sent: false };
  }
  if (!query.requiresPreparation() || query.name || query.rows) return { sent: false };
  query.lead = lead;
  let result: Promise<unknown> | undefined;
  if (!query.callback)
    result = new Promise((resolve, reject) => {
      query.callback = (error, value) => (error ? reject(error) : resolve(value));
    });
  (client.query as (q: unknown) => unknown)(query);
  return { sent: true, result };
}
