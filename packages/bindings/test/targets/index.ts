import type { BindingTarget } from '@duetime/bindings/conformance';
import { target as drizzleNodePostgres } from './drizzle-node-postgres.js';
import { target as drizzlePostgresJs, hosted as drizzlePostgresJsHosted } from './drizzle-postgres-js.js';
import { target as knex, hosted as knexHosted } from './knex.js';
import { target as kysely, hosted as kyselyHosted } from './kysely.js';
import { target as nodePostgres } from './node-postgres.js';
import { target as postgresJs, hosted as postgresJsHosted } from './postgres-js.js';
import { target as prisma, hosted as prismaHosted } from './prisma.js';
import { target as sequelize, hosted as sequelizeHosted } from './sequelize.js';
import { target as typeorm, hosted as typeormHosted } from './typeorm.js';

/** A library's target, and the module exporting it as `target` (for the child processes of the group). */
export interface Target {
  // biome-ignore lint/suspicious/noExplicitAny: each target has its library's own type
  target: BindingTarget<any>;
  module: URL;
  /** The export of `module` holding the target. */
  exportName: string;
}

const at = (file: string) => new URL(`./${file}.ts`, import.meta.url);

/** Every library this package binds, by the target's name. */
export const TARGETS: Record<string, Target> = Object.fromEntries(
  (
    [
      [nodePostgres, 'node-postgres'],
      [postgresJs, 'postgres-js'],
      [kysely, 'kysely'],
      [knex, 'knex'],
      [drizzleNodePostgres, 'drizzle-node-postgres'],
      [drizzlePostgresJs, 'drizzle-postgres-js'],
      [prisma, 'prisma'],
      [typeorm, 'typeorm'],
      [sequelize, 'sequelize'],
      // Processors in the library's own transactions (the backend's `transactions` option).
      [postgresJsHosted, 'postgres-js', 'hosted'],
      [drizzlePostgresJsHosted, 'drizzle-postgres-js', 'hosted'],
      [kyselyHosted, 'kysely', 'hosted'],
      [knexHosted, 'knex', 'hosted'],
      [prismaHosted, 'prisma', 'hosted'],
      [typeormHosted, 'typeorm', 'hosted'],
      [sequelizeHosted, 'sequelize', 'hosted'],
    ] as const
  ).map(([target, file, exportName = 'target']) => [target.name, { target, module: at(file), exportName }]),
);
