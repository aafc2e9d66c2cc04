import { connectNats } from '@duetime/backend-nats';
import type { AuditFigures } from './audit.js';

interface StoredMsg {
  subject: string;
  seq: number;
  time: string;
  hdrs?: string;
  data?: string;
}

/** A message's headers as one line (`Name: value; …`), from the base64 block the JetStream API answers. */
function headersOf(hdrs: string | undefined): string {
  if (!hdrs) return '';
  return Buffer.from(hdrs, 'base64')
    .toString('utf8')
    .split('\r\n')
    .slice(1)
    .filter((line) => line.length > 0)
    .join('; ');
}

/** The keys an audit found lost or left pending past their due time (the first `max`). */
export function keysInTrouble(figures: AuditFigures, max = 8): string[] {
  const keys = new Set(figures.lostPuts.map((p) => p.key));
  for (const problem of figures.problems) {
    const key = /^(\S+): /.exec(problem)?.[1];
    if (key && /stuck|pending/.test(problem)) keys.add(key);
  }
  return [...keys].slice(0, max);
}

/**
 * What a NATS store holds for `keys` (each key's record, timer and latest fire, with headers) and the
 * state of its fires consumer: printed when an outage run lost or left behind schedules, to tell a lost
 * timer from a fire that was dropped or never taken. Keys of the run are plain (`k/g1/4`), so their
 * subjects are their segments joined by dots.
 */
export async function describeNatsKeys(
  url: string,
  prefix: string,
  keys: readonly string[],
): Promise<string[]> {
  const nc = await connectNats(url, { connectTimeoutMs: 3000 });
  const lines: string[] = [];
  const api = async (subject: string, body: unknown) =>
    JSON.parse(
      new TextDecoder().decode((await nc.request(subject, JSON.stringify(body), { timeout: 3000 })).data),
    );
  try {
    const stream = `${prefix}_store`;
    const consumer = await api(`$JS.API.CONSUMER.INFO.${stream}.${prefix}_fires`, {});
    lines.push(
      consumer.error
        ? `fires consumer: ${consumer.error.description}`
        : `fires consumer: delivered ${JSON.stringify(consumer.delivered)} ack_floor ${JSON.stringify(consumer.ack_floor)} pending ${consumer.num_pending} ack_pending ${consumer.num_ack_pending} redelivered ${consumer.num_redelivered} waiting ${consumer.num_waiting}`,
    );
    for (const key of keys) {
      const tokens = key.split('/').join('.');
      for (const kind of ['s', 't', 'f']) {
        const subject = `${prefix}.${kind}.${tokens}`;
        const reply = await api(`$JS.API.STREAM.MSG.GET.${stream}`, { last_by_subj: subject });
        const m = reply.message as StoredMsg | undefined;
        // A record's body says which version it is (attempts, last error, its timer's id, due time).
        const body = m?.data ? ` ${Buffer.from(m.data, 'base64').toString('utf8').slice(0, 300)}` : '';
        lines.push(
          m
            ? `${key} ${kind}: seq ${m.seq} at ${m.time} ${headersOf(m.hdrs)}${body}`
            : `${key} ${kind}: none (${reply.error?.description ?? 'no message'})`,
        );
      }
    }
  } catch (error) {
    lines.push(`could not read the store: ${String(error)}`);
  } finally {
    await nc.close();
  }
  return lines;
}

/**
 * For a run on NATS whose audit found schedules lost or left pending: where each such key stands in the
 * stream and the state of the fires consumer (nothing for other backends or a clean audit).
 */
export async function describeTrouble(
  target: { kind: string; url?: string; prefix?: string },
  figures: AuditFigures,
): Promise<string[]> {
  if (target.kind !== 'nats' || !target.url || !target.prefix) return [];
  if (figures.lost === 0 && figures.stuck === 0) return [];
  return describeNatsKeys(target.url, target.prefix, keysInTrouble(figures));
}
