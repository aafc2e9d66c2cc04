import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** Compares two secrets in constant time (whatever their lengths). */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b) && given.length === expected.length;
}

/** A random token for CSRF checks and nonces: 32 hex characters. */
export function randomToken(bytes = 16): string {
  return randomBytes(bytes).toString('hex');
}

/** Whether `host` (as given to listen) is a loopback address. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1' || /^127(\.\d{1,3}){3}$/.test(h);
}

/**
 * Hides secrets in text shown to people or written to logs: the password of any URL (`//user:pass@`) and
 * each of `secrets` given (a backend URL's password, the dashboard token).
 */
export function redactText(text: string, secrets: readonly string[] = []): string {
  let out = text.replace(/(\/\/[^/\s:@]*):[^@\s/]*@/g, '$1:***@');
  for (const secret of secrets) if (secret.length >= 4) out = out.split(secret).join('***');
  return out;
}
