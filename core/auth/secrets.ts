import { createHash, randomBytes } from 'node:crypto';

/** A random secret for a session cookie or an admin token: 256 bits, base64url, with a readable prefix. */
export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString('base64url')}`;
}

/** Secrets are stored only as their SHA-256 (they are random, so no slow hash is needed). */
export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}
