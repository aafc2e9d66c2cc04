/**
 * Bindings between duetime and the application's own SQL library. Each subpath binds one library and
 * needs only that library installed:
 *
 * | library        | import                              | binding          |
 * | -------------- | ----------------------------------- | ---------------- |
 * | node-postgres  | `@duetime/bindings/pg`              | `fromPg`         |
 * | postgres.js    | `@duetime/bindings/postgres-js`     | `fromPostgresJs` |
 * | Kysely         | `@duetime/bindings/kysely`          | `fromKysely`     |
 * | Knex           | `@duetime/bindings/knex`            | `fromKnex`       |
 * | Drizzle        | `@duetime/bindings/drizzle`         | `fromDrizzle`    |
 * | TypeORM        | `@duetime/bindings/typeorm`         | `fromTypeORM`    |
 * | Prisma         | `@duetime/bindings/prisma`          | `fromPrisma`     |
 *
 * A binding turns the library's transaction into an {@link SqlExecutor}; `store.join(executor, fn)` runs
 * duetime's writes in that transaction, so they commit and roll back with the application's.
 */
export { countOf, questionMarks, refuse, rowsOf, type SqlExecutor, type SqlResult } from './executor.js';
