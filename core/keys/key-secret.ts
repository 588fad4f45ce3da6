import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { randomBase62, toBase62 } from '../ids.ts';

/**
 * API key secrets look like `mas_` + 32 random base62 characters (~190 bits) + a 6-character
 * CRC32 checksum, as GitHub tokens do: a typo or a truncated paste is refused without a
 * database look-up, and secret scanners can recognise the format.
 */
const PREFIX = 'mas_';
const RANDOM_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const FORMAT = new RegExp(`^${PREFIX}[0-9A-Za-z]{${RANDOM_LENGTH + CHECKSUM_LENGTH}}$`);
/** How much of the secret is kept to recognise a key in a list: the prefix and 8 random characters. */
const DISPLAY_LENGTH = PREFIX.length + 8;

function checksum(body: string): string {
  return toBase62(crc32(body), CHECKSUM_LENGTH);
}

export function generateKeySecret(): string {
  const body = PREFIX + randomBase62(RANDOM_LENGTH);
  return body + checksum(body);
}

/** True when the text has the shape and checksum of one of our keys (not that the key exists). */
export function isWellFormedKey(secret: string): boolean {
  if (!FORMAT.test(secret)) return false;
  const body = secret.slice(0, -CHECKSUM_LENGTH);
  return secret.slice(-CHECKSUM_LENGTH) === checksum(body);
}

export function hashKey(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export function displayPrefix(secret: string): string {
  return secret.slice(0, DISPLAY_LENGTH);
}
