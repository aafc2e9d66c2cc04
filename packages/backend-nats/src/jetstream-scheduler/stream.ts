import { InvalidArgumentError, NotSupportedError } from '@duetime/core';
import type { JetStreamManager, StreamConfig, StreamInfo } from '@nats-io/jetstream';
import { type ServerVersion, versionAtLeast } from '../connection.js';
import { isNotFound, toBackendError } from '../errors.js';
import { addOrRead } from '../streams.js';
import type { SubjectLayout } from './subjects.js';

/** How schedules run: by the server (ADR-51) or by the library's lease-elected pump. */
export type ScheduleMode = 'native' | 'emulated';
/** What the caller asks for; `auto` follows the server and the stream (see {@link ensureSchedulerStream}). */
export type RequestedMode = 'auto' | ScheduleMode;

/** Server version that first runs `@at` schedules. */
export const NATIVE_AT_VERSION: readonly [number, number] = [2, 12];
/** Server version that first runs cron schedules (6 fields, UTC). */
export const NATIVE_CRON_VERSION: readonly [number, number] = [2, 14];

/** What {@link ensureSchedulerStream} settled on. */
export interface StreamSetup {
  /** How one-shot timers (`after`, `at`, `atId`) run. */
  mode: ScheduleMode;
  /** How cron definitions run (`emulated` on a native stream whose server predates cron schedules). */
  cronMode: ScheduleMode;
  /** The stream's deduplication window as the server reports it, in milliseconds. */
  duplicateWindowMs: number;
  /** The server version from the connection's INFO. */
  serverVersion: string;
}

export interface StreamSettings {
  name: string;
  layout: SubjectLayout;
  duplicateWindowMs: number;
  replicas: number;
  storage: 'file' | 'memory';
}

/** Whether the server `version` is at least `min` (major, minor). */
function atLeast(version: ServerVersion, min: readonly [number, number]): boolean {
  return versionAtLeast(version, min[0], min[1]);
}

const NS_PER_MS = 1_000_000;

/**
 * Creates the scheduler's stream, or checks and completes an existing one, and decides the mode.
 *
 * The stream decides, so every process sharing a prefix agrees: a stream whose config comes back from the
 * server with `allow_msg_schedules: true` runs natively; any other runs through the pump. A new stream asks
 * for schedules when the server's version is at least 2.12 (and `requested` is not `emulated`); a server
 * that does not know the field drops it silently (2.9 does), which the echoed config reveals.
 */
export async function ensureSchedulerStream(
  jsm: JetStreamManager,
  settings: StreamSettings,
  requested: RequestedMode,
  serverVersion: ServerVersion,
): Promise<StreamSetup> {
  const serverHasSchedules = atLeast(serverVersion, NATIVE_AT_VERSION);
  if (requested === 'native' && !serverHasSchedules)
    throw new NotSupportedError(
      `mode "native" needs a NATS server >= ${NATIVE_AT_VERSION.join('.')} with message schedules; the server is ${serverVersion.text}`,
    );
  const wantNative = requested === 'native' || (requested === 'auto' && serverHasSchedules);

  let info: StreamInfo | undefined;
  try {
    info = await jsm.streams.info(settings.name);
  } catch (error) {
    if (!isNotFound(error)) throw toBackendError(`read stream ${settings.name}`, error);
  }

  if (!info) {
    const config: Partial<StreamConfig> & { name: string } = {
      name: settings.name,
      subjects: settings.layout.streamSubjects,
      retention: 'limits' as StreamConfig['retention'],
      max_age: 0,
      discard: 'old' as StreamConfig['discard'],
      allow_rollup_hdrs: true,
      allow_direct: true,
      duplicate_window: settings.duplicateWindowMs * NS_PER_MS,
      num_replicas: settings.replicas,
      storage: settings.storage as StreamConfig['storage'],
    };
    if (wantNative) config.allow_msg_schedules = true;
    info = await addOrRead(
      () => jsm.streams.add(config),
      () => jsm.streams.info(settings.name),
      (error) => toBackendError(`create stream ${settings.name}`, error),
    );
    if (requested === 'native' && info.config.allow_msg_schedules !== true)
      throw new NotSupportedError(
        `mode "native": the server (${serverVersion.text}) did not keep allow_msg_schedules on stream ${settings.name}`,
      );
  } else {
    info = await completeExisting(jsm, info, settings, requested);
  }

  const native = info.config.allow_msg_schedules === true;
  return {
    mode: native ? 'native' : 'emulated',
    cronMode: native && atLeast(serverVersion, NATIVE_CRON_VERSION) ? 'native' : 'emulated',
    duplicateWindowMs: Math.round((info.config.duplicate_window ?? 0) / NS_PER_MS),
    serverVersion: serverVersion.text,
  };
}

async function completeExisting(
  jsm: JetStreamManager,
  info: StreamInfo,
  settings: StreamSettings,
  requested: RequestedMode,
): Promise<StreamInfo> {
  const config = info.config;
  const name = settings.name;
  if (config.max_age && config.max_age > 0)
    throw new InvalidArgumentError(
      'options.stream',
      name,
      `the existing stream has max_age ${config.max_age / 1e9}s, which would delete pending timers; remove the age limit`,
    );
  if (config.retention !== 'limits')
    throw new InvalidArgumentError(
      'options.stream',
      name,
      `the existing stream has ${config.retention} retention; the scheduler needs limits retention`,
    );
  const native = config.allow_msg_schedules === true;
  if (requested === 'emulated' && native)
    throw new InvalidArgumentError(
      'options.mode',
      requested,
      `stream ${name} has message schedules enabled (the server cannot disable them), so processes in mode "auto" run it natively; use mode "auto" or another prefix`,
    );
  if (requested === 'native' && !native)
    throw new InvalidArgumentError(
      'options.mode',
      requested,
      `stream ${name} was created without message schedules (emulated mode) and may hold definitions only the pump fires; use mode "auto" or another prefix`,
    );
  // Completed, never narrowed: subjects this version uses are added (an earlier one's stay), and the pump's
  // lease needs rollup headers and direct get (it reads the lease and the server-clock probe with it).
  const missing = settings.layout.streamSubjects.filter((s) => !(config.subjects ?? []).includes(s));
  if (missing.length === 0 && config.allow_rollup_hdrs && config.allow_direct) return info;
  try {
    return await jsm.streams.update(name, {
      ...config,
      subjects: [...(config.subjects ?? []), ...missing],
      allow_rollup_hdrs: true,
      allow_direct: true,
    });
  } catch (error) {
    throw toBackendError(`update stream ${name}`, error);
  }
}
