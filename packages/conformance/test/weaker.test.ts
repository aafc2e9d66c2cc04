import { runConformance } from '../src/index.js';
import { fakeSqlProbe, openFakeSql, openKeyOrder } from './doubles.js';

// The suite's weaker promises, on a store that keeps no deadline order and has no push channel.
runConformance({
  name: 'memory in key order, without a push channel',
  open: openKeyOrder,
  capabilities: { multiProcess: false, durable: false, dueOrder: false, pushChannel: false },
  only: ['schedules', 'reads', 'pushChannel', 'crashes'],
});

// The SQL groups, on a stand-in for an SQL handle that refuses transaction control as a backend must.
runConformance({
  name: 'memory with a stand-in SQL handle',
  open: openFakeSql,
  capabilities: { multiProcess: false, durable: false, sql: true },
  sql: fakeSqlProbe,
  only: ['batches', 'transactionControl'],
});
