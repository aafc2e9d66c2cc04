import type Database from 'better-sqlite3';
import {
  type DeadLetterShape,
  deadLetterListQuery,
  type ListShape,
  listQuery,
  type StoreQuery,
  storeQueries,
} from './sql/queries.js';
import type { Tables } from './sql/tables.js';

/** The store's statements on one connection, prepared on first use and then reused. */
export class Statements {
  readonly #db: Database.Database;
  readonly #tables: Tables;
  readonly #sql: ReturnType<typeof storeQueries>;
  readonly #prepared = new Map<string, Database.Statement>();

  constructor(db: Database.Database, tables: Tables) {
    this.#db = db;
    this.#tables = tables;
    this.#sql = storeQueries(tables);
  }

  get(name: StoreQuery): Database.Statement {
    return this.#cached(name, () => this.#sql[name]);
  }

  list(shape: ListShape): Database.Statement {
    const id = `list:${shape.order}:${shape.through}:${shape.prefix}:${shape.after}:${shape.recurring}:${shape.select}`;
    return this.#cached(id, () => listQuery(this.#tables, shape));
  }

  deadLetterList(shape: DeadLetterShape): Database.Statement {
    return this.#cached(`dead:${shape.prefix}:${shape.after}:${shape.select}`, () =>
      deadLetterListQuery(this.#tables, shape),
    );
  }

  #cached(id: string, sql: () => string): Database.Statement {
    let statement = this.#prepared.get(id);
    if (!statement) {
      statement = prepare(this.#db, sql());
      this.#prepared.set(id, statement);
    }
    return statement;
  }
}

/**
 * Prepares a statement that returns plain numbers, whatever `defaultSafeIntegers` the application set on
 * its own connection (every integer duetime stores fits in a double).
 */
export function prepare(db: Database.Database, sql: string): Database.Statement {
  const statement = db.prepare(sql);
  return statement.reader ? statement.safeIntegers(false) : statement;
}
