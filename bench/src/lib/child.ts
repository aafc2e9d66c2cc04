/**
 * Measurements that need a process of their own (CPU and RSS of one library alone, replicas to kill,
 * dispatcher processes side by side):
 * `node lib/child.ts <task> <json-args>`; prints one JSON line with the result, or `FAILED <reason>`.
 */
import { dashboardChild } from '../workloads/dashboard.js';
import { replicaChild } from '../workloads/failover.js';
import { idleChild, idleFillChild } from '../workloads/idle.js';
import { recurringChild } from '../workloads/recurring.js';
import { scaleChild } from '../workloads/scale.js';
import { scaleoutChild } from '../workloads/scaleout.js';
import { tickChild } from '../workloads/tick.js';

const [task, raw] = process.argv.slice(2);
const args = JSON.parse(raw ?? '{}') as Record<string, unknown>;

const tasks: Record<string, () => Promise<unknown>> = {
  idle: () => idleChild(args),
  'idle-fill': () => idleFillChild(args),
  scale: () => scaleChild(args),
  replica: () => replicaChild(args),
  tick: () => tickChild(args),
  recurring: () => recurringChild(args),
  scaleout: () => scaleoutChild(args),
  dashboard: () => dashboardChild(args),
};
const fn = tasks[task ?? ''];
if (!fn) {
  console.error(`unknown task ${task}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await fn()));
} catch (error) {
  // The last line the parent reads: why the measurement failed (the stack goes to stderr).
  console.log(`FAILED ${String((error as Error).message ?? error).split('\n')[0]}`);
  console.error(error);
  process.exit(1);
}
process.exit(0);
