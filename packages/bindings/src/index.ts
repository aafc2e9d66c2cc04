/**
 * Bindings between duetime and the application's own SQL library. Each subpath binds one library and
 * needs only that library installed:
 *
 * | library        | import                              | join             | processor     |
 * | -------------- | ----------------------------------- | ---------------- | ------------- |
 * | node-postgres  | `@duetime/bindings/pg`              | `fromPg`         | (`tx.sql`)    |
 * | postgres.js    | `@duetime/bindings/postgres-js`     | `fromPostgresJs` |               |
 * | Kysely         | `@duetime/bindings/kysely`          | `fromKysely`     | `toKysely`    |
 * | Knex           | `@duetime/bindings/knex`            | `fromKnex`       | `toKnex`      |
 * | Drizzle        | `@duetime/bindings/drizzle`         | `fromDrizzle`    | `toDrizzle`   |
 * | TypeORM        | `@duetime/bindings/typeorm`         | `fromTypeORM`    | `toTypeORM`   |
 * | Prisma         | `@duetime/bindings/prisma`          | `fromPrisma`     | `toPrisma`    |
 * | Sequelize      | `@duetime/bindings/sequelize`       | `fromSequelize`  | `toSequelize` |
 * | PGlite         | `@duetime/bindings/pglite`          | `fromPglite`     | (`tx.sql`)    |
 *
 * Join: a binding turns the library's transaction into an {@link SqlExecutor}; `store.join(executor, fn)`
 * runs duetime's writes in that transaction, so they commit and roll back with the application's.
 * Processor: a `to…` binding puts the library on the delivery transaction's client (`tx.sql` in a
 * processor on the PostgreSQL backend), so the processor's writes commit with the schedule's consumption.
 */
export {
  arraysAsLiterals,
  countOf,
  deliveryClient,
  onceFor,
  overriding,
  pinned,
  questionMarks,
  refuse,
  rowsOf,
  type SqlExecutor,
  type SqlResult,
} from './executor.js';
