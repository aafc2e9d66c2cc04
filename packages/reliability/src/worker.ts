/**
 * Entry point of the processes the suite starts, kills, pauses and stops:
 * `node worker.mjs <role> <json-args>` (bundled by processes.ts). Each role opens the backend its
 * `target` names, runs, and prints one-line markers on stdout (`READY`, `LEADER <epoch> <ms>`, …) that
 * the parent waits for. SIGTERM drains and exits 0.
 */
import { roles } from './roles.js';

const [role, rawArgs] = process.argv.slice(2);
const run = role === undefined ? undefined : roles[role];
if (!run) {
  console.error(`usage: worker <role> <json-args>; roles: ${Object.keys(roles).join(', ')}`);
  process.exit(2);
}
const controller = new AbortController();
process.once('SIGTERM', () => controller.abort());
process.once('SIGINT', () => controller.abort());
try {
  await run(JSON.parse(rawArgs ?? '{}') as Record<string, unknown>, controller.signal);
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
