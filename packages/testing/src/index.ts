/**
 * Servers of a test's own for duetime's test suites, benchmarks and reliability runs: JetStream servers
 * and clusters, Redis servers and clusters, which a test can crash, freeze and restart without disturbing
 * the shared services. Not published.
 */
export * from './nats.js';
export * from './ports.js';
export * from './redis.js';
