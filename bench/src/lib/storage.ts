/** Bytes a server holds for one queue's data, read through each server's own accounting. */

/** Sum of `MEMORY USAGE` (exact: SAMPLES 0) over every key matching `pattern`. */
export async function redisKeyBytes(url: string, pattern: string): Promise<number> {
  const { Redis } = await import('ioredis');
  const redis = new Redis(url);
  try {
    let total = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length === 0) continue;
      const pipeline = redis.pipeline();
      for (const key of keys) pipeline.memory('USAGE', key, 'SAMPLES', '0');
      for (const [error, bytes] of (await pipeline.exec()) ?? []) if (!error) total += Number(bytes ?? 0);
    } while (cursor !== '0');
    return total;
  } finally {
    redis.disconnect();
  }
}

/** Sizes of every table of `schema` with its indexes and TOAST (`pg_total_relation_size`). */
export async function pgSchemaBytes(url: string, schema: string): Promise<number> {
  const { Client } = await import('pg');
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ bytes: string | null }>(
      `SELECT sum(pg_total_relation_size(c.oid))::text AS bytes FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`,
      [schema],
    );
    return Number(rows[0]?.bytes ?? 0);
  } finally {
    await client.end();
  }
}

/** `state.bytes` of the named JetStream streams, through the JetStream API's STREAM.INFO request. */
export async function natsStreamBytes(url: string, streams: string[]): Promise<number> {
  const { connectNats } = await import('@duetime/backend-nats');
  const nc = await connectNats(url);
  try {
    let total = 0;
    for (const stream of streams) {
      const reply = await nc.request(`$JS.API.STREAM.INFO.${stream}`, '', { timeout: 5000 });
      const info = reply.json<{ state?: { bytes?: number }; error?: { description?: string } }>();
      if (info.error) throw new Error(`stream info ${stream}: ${info.error.description}`);
      total += info.state?.bytes ?? 0;
    }
    return total;
  } finally {
    await nc.close();
  }
}
