import { type CatchUp, InvalidArgumentError, scheduleKey } from '@duetime/core';
import { EXIT, UsageError } from '../io.js';
import { parseInstant } from './common.js';
import type { Subcommand, Values } from './schedules.js';

/**
 * `schedules pause|resume|trigger <key>`: the store's operations on one active schedule (`tx.pauseSchedule`,
 * `tx.resumeSchedule`, `tx.triggerSchedule`), each in a transaction of its own. A key with no active
 * schedule is the store's NotFoundError (exit code 1).
 */

const MAX_NOTE = 1000;

function needKey(name: string, positionals: string[]): string {
  const key = positionals[0];
  if (key === undefined) throw new UsageError(`schedules ${name} needs the <key> of a schedule`, 'schedules');
  if (positionals.length > 1)
    throw new UsageError(`schedules ${name} takes one <key>, not ${positionals.length}`, 'schedules');
  return scheduleKey(key);
}

/** `--catch-up latest|skip|<n>`: the catch-up rule of one resume (`<n>`: run at most the n latest). */
export function parseCatchUp(text: string): CatchUp {
  if (text === 'latest' || text === 'skip') return text;
  if (/^[1-9]\d*$/.test(text)) return { max: Number(text) };
  throw new InvalidArgumentError(
    '--catch-up',
    text,
    'must be latest, skip, or a positive integer n (run at most the n latest missed occurrences)',
  );
}

function noteOf(values: Values): string | undefined {
  const note = values.note as string | undefined;
  if (note !== undefined && note.length > MAX_NOTE)
    throw new InvalidArgumentError('--note', note, `must be at most ${MAX_NOTE} characters`);
  return note;
}

export const pause: Subcommand = {
  usage: 'pause <key> [--note <text>]',
  options: { note: { type: 'string' } },
  check(values, positionals) {
    needKey('pause', positionals);
    noteOf(values);
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const note = noteOf(values);
    const paused = await backend.store.transact((tx) =>
      tx.pauseSchedule(key, note !== undefined ? { note } : {}),
    );
    if (values.json) io.out(JSON.stringify({ key, paused }));
    else
      io.out(
        paused
          ? `paused ${key}: its own deliveries wait until \`duetime schedules resume ${key}\``
          : `${key} was paused already; nothing changed`,
      );
    return EXIT.ok;
  },
};

export const resume: Subcommand = {
  usage: 'resume <key> [--catch-up latest|skip|<n>]',
  options: { 'catch-up': { type: 'string' } },
  check(values, positionals) {
    needKey('resume', positionals);
    if (values['catch-up'] !== undefined) parseCatchUp(values['catch-up'] as string);
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const rule = values['catch-up'] === undefined ? undefined : parseCatchUp(values['catch-up'] as string);
    const result = await backend.store.transact((tx) =>
      tx.resumeSchedule(key, rule !== undefined ? { catchUp: rule } : {}),
    );
    const caughtUp = result.caughtUp.map((d) => d.toISOString());
    const missed = result.missed && {
      count: result.missed.count,
      first: result.missed.first.toISOString(),
      last: result.missed.last.toISOString(),
    };
    if (values.json) {
      io.out(JSON.stringify({ key, resumed: result.resumed, caughtUp, ...(missed ? { missed } : {}) }));
      return EXIT.ok;
    }
    if (!result.resumed) {
      io.out(`${key} was not paused; nothing changed`);
      return EXIT.ok;
    }
    io.out(`resumed ${key}`);
    if (caughtUp.length > 0)
      io.out(
        `runs now ${caughtUp.length} occurrence${caughtUp.length === 1 ? '' : 's'} missed while paused: ${caughtUp.join(', ')}`,
      );
    if (missed)
      io.out(
        `not run: ${missed.count} occurrence${missed.count === 1 ? '' : 's'} missed while paused (${missed.first} … ${missed.last})`,
      );
    return EXIT.ok;
  },
};

export const trigger: Subcommand = {
  usage: 'trigger <key> [--at <iso>]',
  options: { at: { type: 'string' } },
  check(values, positionals) {
    needKey('trigger', positionals);
    if (values.at !== undefined) parseInstant('--at', values.at as string);
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const at = values.at === undefined ? undefined : parseInstant('--at', values.at as string);
    const id = await backend.store.transact((tx) => tx.triggerSchedule(key, at ? { at } : {}));
    if (values.json) io.out(JSON.stringify({ key, occurrence: id, ...(at ? { at: at.toISOString() } : {}) }));
    else
      io.out(
        `triggered ${key}: one extra delivery ${at ? `at ${at.toISOString()}` : 'now'} (occurrence ${id}); its deadline does not move`,
      );
    return EXIT.ok;
  },
};
