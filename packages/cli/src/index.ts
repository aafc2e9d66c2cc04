export { type CliCommand, COMMANDS } from './commands/index.js';
export { type CliIo, EXIT, UsageError } from './io.js';
export { mainHelp, runCli } from './main.js';
export {
  BACKEND_PACKAGES,
  BACKEND_SCHEMES,
  type BackendKind,
  type BackendTarget,
  backendKind,
  DEFAULT_BACKEND_URL,
  natsServers,
  type OpenBackendOptions,
  openBackend,
  parseBackendTarget,
  redact,
  STORE_PARAMETER,
  sqliteFilename,
} from './open-backend.js';
export { MissingPackageError } from './optional.js';
