/**
 * What every backend factory repeats, once: reading options (`…Ms` names, deprecated aliases, clock and
 * logger), connection URLs and their redaction, retries on the injected clock, and the closed checks and
 * argument validation in front of an adapter's leases and cursors.
 */
export * from './lifecycle.js';
export * from './options.js';
export * from './retry.js';
export * from './url.js';
