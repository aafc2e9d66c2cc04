import { pgSchema, text, timestamp } from 'drizzle-orm/pg-core';

/** The service's own table, in a schema of its own (`orders_<name>`), next to duetime's. */
export function ordersTable(schemaName: string) {
  return pgSchema(schemaName).table('orders', {
    id: text('id').primaryKey(),
    status: text('status', { enum: ['pending', 'paid', 'expired'] }).notNull(),
    placedAt: timestamp('placed_at', { withTimezone: true }).notNull().defaultNow(),
  });
}

export type Orders = ReturnType<typeof ordersTable>;
