/**
 * Entry point of the child processes the conformance suite starts and kills:
 * `node worker.js <adapter-module-url> <role> <namespace> <json-args>`.
 * The adapter module exports `open(namespace)`; the role decides what the process does. Roles print
 * single-line markers on stdout (`READY`, `IN_PROCESSOR <key>`) that the parent waits for.
 */
import type { Backend } from '@duetime/core';
import { roles } from './roles/index.js';

const [moduleUrl, role, namespace, rawArgs] = process.argv.slice(2);
if (!moduleUrl || !role || !namespace) {
  console.error('usage: worker <adapter-module-url> <role> <namespace> [json-args]');
  process.exit(2);
}
const run = roles[role];
if (!run) {
  console.error(`unknown role ${role}; known: ${Object.keys(roles).join(', ')}`);
  process.exit(2);
}
const adapter = (await import(moduleUrl)) as { open?: (namespace: string) => Promise<Backend> };
if (typeof adapter.open !== 'function') {
  console.error(`${moduleUrl} does not export open(namespace)`);
  process.exit(2);
}
const backend = await adapter.open(namespace);
const controller = new AbortController();
process.once('SIGTERM', () => controller.abort());
process.once('SIGINT', () => controller.abort());
try {
  await run({
    backend,
    args: rawArgs ? (JSON.parse(rawArgs) as Record<string, unknown>) : {},
    signal: controller.signal,
  });
  await backend.close();
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
