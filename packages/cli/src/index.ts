export { type CliIo, EXIT, UsageError } from './io.js';
export { mainHelp, runCli } from './main.js';
export {
  BACKEND_SCHEMES,
  type BackendKind,
  backendKind,
  DEFAULT_BACKEND_URL,
  natsServers,
  type OpenBackendOptions,
  openBackend,
  redact,
  sqliteFilename,
} from './open-backend.js';
