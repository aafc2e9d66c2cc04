export { createFileBackend, type FileBackendOptions, fileBackendCapabilities } from './file-backend.js';
