/**
 * Measurements that need a process of their own (CPU and RSS of one library alone, replicas to kill):
 * `node lib/child.ts <task> <json-args>`; prints one JSON line with the result.
 */
import { replicaChild } from '../workloads/failover.js';
import { idleChild } from '../workloads/idle.js';
import { scaleChild } from '../workloads/scale.js';
import { tickChild } from '../workloads/tick.js';

const [task, raw] = process.argv.slice(2);
const args = JSON.parse(raw ?? '{}') as Record<string, unknown>;

const tasks: Record<string, () => Promise<unknown>> = {
  idle: () => idleChild(args),
  scale: () => scaleChild(args),
  replica: () => replicaChild(args),
  tick: () => tickChild(args),
};
const fn = tasks[task ?? ''];
if (!fn) {
  console.error(`unknown task ${task}`);
  process.exit(2);
}
console.log(JSON.stringify(await fn()));
process.exit(0);
