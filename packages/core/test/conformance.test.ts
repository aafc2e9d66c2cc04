import { runConformance } from '@duetime/conformance';
import { createMemoryBackend, MemoryDatabase } from '../src/index.js';

// The in-memory backend is the reference implementation: it runs the whole suite that applies to a
// backend living inside one process.
const databases = new Map<string, MemoryDatabase>();

runConformance({
  name: 'memory',
  capabilities: { multiProcess: false, durable: false },
  async open(namespace) {
    let database = databases.get(namespace);
    if (!database) {
      database = new MemoryDatabase();
      databases.set(namespace, database);
    }
    return createMemoryBackend({ database });
  },
});
