import { describe, expect, it } from 'vitest';
import { displayPrefix, generateKeySecret, hashKey, isWellFormedKey } from '../../core/keys/key-secret.ts';

describe('key secrets', () => {
  it('have a recognisable prefix, enough randomness and a valid checksum', () => {
    const keys = new Set(Array.from({ length: 1000 }, generateKeySecret));
    expect(keys.size).toBe(1000);
    for (const k of keys) {
      expect(k).toMatch(/^mas_[0-9A-Za-z]{38}$/);
      expect(isWellFormedKey(k)).toBe(true);
    }
  });

  it('refuses a typo or a truncated paste without a look-up', () => {
    const k = generateKeySecret();
    const typo = k.slice(0, 10) + (k[10] === 'a' ? 'b' : 'a') + k.slice(11);
    expect(isWellFormedKey(typo)).toBe(false);
    expect(isWellFormedKey(k.slice(0, -1))).toBe(false);
    expect(isWellFormedKey(`${k} `)).toBe(false);
    expect(isWellFormedKey('')).toBe(false);
  });

  it('stores a SHA-256 hash and a short display prefix only', () => {
    const k = generateKeySecret();
    expect(hashKey(k)).toMatch(/^[0-9a-f]{64}$/);
    expect(displayPrefix(k)).toBe(k.slice(0, 12));
  });
});
