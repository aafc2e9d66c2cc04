import { InvalidArgumentError } from '../errors.js';

/**
 * Hides secrets in a connection URL, or in text that merely looks like one, for messages and logs: the
 * password of every `user:password@` (several hosts may each carry one) and the value of query parameters
 * named like a secret (`password`, `pass`, `token`, `secret`). Text without either comes back unchanged.
 *
 * @example redactUrl('postgres://app:s3cret@db:5432/app') // 'postgres://app:***@db:5432/app'
 */
export function redactUrl(text: string): string {
  return String(text)
    .replace(/(^|\/\/|,|\s)([^:/?#@,\s]*):[^@/?#\s]*@/g, '$1$2:***@')
    .replace(/([?&;](?:password|pass|pwd|token|secret|auth_token)=)[^&#;\s]*/gi, '$1***');
}

/** How {@link parseBackendUrl} checks a URL. */
export interface BackendUrlSpec {
  /** Names the URL in errors, e.g. `connection.url` or `--backend`. */
  field: string;
  /** Accepted schemes with their colon, e.g. `['redis:', 'rediss:']`. */
  schemes: readonly string[];
  /** An example shown when the URL cannot be read, e.g. `redis://[user:password@]host[:port][/db]`. */
  example: string;
  /** Whether the URL must name a host (default true). */
  host?: boolean;
  /**
   * Query parameters the URL may carry: a list (any other is refused with an InvalidArgumentError that
   * lists these), or `any` to leave them to the driver. Default: none.
   */
  params?: readonly string[] | 'any';
}

/** A checked connection URL. */
export interface BackendUrl {
  /** The URL as given. */
  readonly given: string;
  readonly url: URL;
  /** The URL with its secrets hidden, for messages. */
  readonly display: string;
  /** The query parameters, each at most once. */
  readonly params: ReadonlyMap<string, string>;
}

/**
 * Reads a backend's connection URL: a string the WHATWG URL parser accepts, with one of `schemes`, a host
 * unless told otherwise, and only the query parameters `params` allows, each at most once.
 *
 * @throws {InvalidArgumentError} naming `spec.field` and the URL with its password hidden.
 */
export function parseBackendUrl(value: unknown, spec: BackendUrlSpec): BackendUrl {
  if (typeof value !== 'string' || value.trim() === '')
    throw new InvalidArgumentError(spec.field, value, `must be a URL such as ${spec.example}`);
  const display = redactUrl(value);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(spec.field, display, `is not a URL (expected ${spec.example})`);
  }
  if (!spec.schemes.includes(url.protocol))
    throw new InvalidArgumentError(
      spec.field,
      display,
      `has the scheme ${url.protocol}; expected ${spec.schemes.join(' or ')}`,
    );
  if ((spec.host ?? true) && url.hostname === '')
    throw new InvalidArgumentError(spec.field, display, `names no host (expected ${spec.example})`);
  return { given: value, url, display, params: checkUrlParams(url.searchParams, spec, display) };
}

/**
 * Checks query parameters against `spec.params` (see {@link BackendUrlSpec.params}); returns them as a map.
 *
 * @throws {InvalidArgumentError} for an unknown or repeated parameter, naming `spec.field` and `display`.
 */
export function checkUrlParams(
  search: URLSearchParams,
  spec: Pick<BackendUrlSpec, 'field' | 'params'>,
  display: string,
): Map<string, string> {
  const allowed = spec.params ?? [];
  const params = new Map<string, string>();
  for (const [name, value] of search) {
    if (allowed !== 'any' && !allowed.includes(name))
      throw new InvalidArgumentError(
        spec.field,
        display,
        `has the unknown parameter ${JSON.stringify(name)}; ${
          allowed.length === 0 ? 'this URL takes no parameters' : `known parameters: ${allowed.join(', ')}`
        }`,
      );
    if (params.has(name))
      throw new InvalidArgumentError(
        spec.field,
        display,
        `gives the parameter ${JSON.stringify(name)} twice`,
      );
    params.set(name, value);
  }
  return params;
}
