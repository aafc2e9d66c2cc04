/** Where the servers of a private NATS cluster listen and keep their stores, and their config files. */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** One server of a {@link PrivateNatsCluster}, as its tests see it. */
export interface PrivateNatsNode {
  /** The server's name (`server_name`), which JetStream reports as a stream's leader or replica. */
  readonly name: string;
  /** Its client port, by which the cluster's methods name it. */
  readonly port: number;
  readonly url: string;
  /** The monitoring port (`/healthz`, `/jsz`, `/varz`). */
  readonly monitorPort: number;
}

/** A server of the cluster as the cluster keeps it: its ports, store, config file and process. */
export interface ClusterNode extends PrivateNatsNode {
  readonly routePort: number;
  readonly dir: string;
  readonly configFile: string;
  child?: ChildProcess;
  frozen: boolean;
}

/** Lays out `size` servers on `ports` (three per server: client, route, monitor) under `root`. */
export function clusterNodes(ports: readonly number[], size: number, root: string): ClusterNode[] {
  const nodes: ClusterNode[] = [];
  for (let i = 0; i < size; i++) {
    const port = ports[3 * i] as number;
    const dir = join(root, String(port));
    mkdirSync(join(dir, 'store'), { recursive: true });
    nodes.push({
      name: `duetime-${port}`,
      port,
      url: `nats://127.0.0.1:${port}`,
      routePort: ports[3 * i + 1] as number,
      monitorPort: ports[3 * i + 2] as number,
      dir,
      configFile: join(dir, 'nats-server.conf'),
      frozen: false,
    });
  }
  return nodes;
}

/** Writes every server's config file: JetStream on its own store, routes to all the servers. */
export function writeClusterConfigs(
  nodes: readonly ClusterNode[],
  options: { syncInterval?: string | undefined } = {},
): void {
  const routes = nodes.map((n) => `    nats-route://127.0.0.1:${n.routePort}`).join('\n');
  for (const n of nodes)
    writeFileSync(
      n.configFile,
      [
        `server_name: ${n.name}`,
        `listen: 127.0.0.1:${n.port}`,
        `http: 127.0.0.1:${n.monitorPort}`,
        'jetstream {',
        `  store_dir: "${join(n.dir, 'store')}"`,
        '  max_memory_store: 256MB',
        '  max_file_store: 2GB',
        ...(options.syncInterval ? [`  sync_interval: ${options.syncInterval}`] : []),
        '}',
        'cluster {',
        '  name: duetime-private',
        `  listen: 127.0.0.1:${n.routePort}`,
        '  routes: [',
        routes,
        '  ]',
        '}',
        '',
      ].join('\n'),
    );
}
