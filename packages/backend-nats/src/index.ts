export * from './jetstream-scheduler/index.js';
