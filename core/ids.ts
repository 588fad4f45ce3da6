import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Random bytes drawn 4 KiB at a time: one call into the CSPRNG serves many ids. */
const pool = Buffer.alloc(4096);
let poolOffset = pool.length;
function randomByte(): number {
  if (poolOffset === pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  return pool[poolOffset++]!;
}

/** Uniformly random base62 text (rejection sampling, so no letter is more likely than another). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const byte = randomByte();
    if (byte < 248) out += ALPHABET[byte % 62];
  }
  return out;
}

export function toBase62(value: number, width: number): string {
  let out = '';
  let n = value;
  for (let i = 0; i < width; i++) {
    out = ALPHABET[n % 62] + out;
    n = Math.floor(n / 62);
  }
  return out;
}

/** Stripe-style identifiers: a type prefix and 24 random base62 characters (~142 bits). */
export type IdPrefix = 'acct' | 'org' | 'inv' | 'key' | 'hold' | 'req' | 'gen' | 'file' | 'sess' | 'adm' | 'app' | 'adu' | 'asess' | 'pay' | 'sgr' | 'prv';
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBase62(24)}`;
}
