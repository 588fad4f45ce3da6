import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Logger } from 'pino';
import { createLimiters } from '../../adapters/limits/rate-limiter.ts';
import { countAttempt } from '../../core/accounts/attempts.ts';
import { authenticate, KeyLookup, LastUsedRecorder, type KeyRow } from '../../core/auth/api-keys.ts';
import type { Execute } from '../../core/db/batch.ts';
import { generateKeySecret, hashKey } from '../../core/keys/key-secret.ts';
import type { RateLimiter, RateLimitState } from '../../core/ports.ts';

/**
 * The limits around keys and sign-ins, with their storage faked: how often a key's last use
 * is written, the key look-up's cache and its refusals, sign-in attempt counting, and the
 * adapter's rate-limit windows. The edges here are those the mutation run
 * (`npm run test:mutation`) found that no other test held.
 */
afterEach(() => {
  vi.restoreAllMocks();
});

/** An Execute that records every statement and answers with `rows`. */
function fakeExecute(rows: (sql: string, params: unknown[]) => unknown[] = () => []) {
  const calls: { sql: string; params: unknown[] }[] = [];
  const execute = (async (sql: string, params: unknown[]) => {
    calls.push({ sql, params });
    return rows(sql, params);
  }) as Execute;
  return { execute, calls };
}

const silent = { warn: vi.fn() } as unknown as Logger;

describe('the last use of a key is written at most once per interval', () => {
  it('writes the first use, none within the interval, and again from the moment it has passed; each key on its own', () => {
    const { execute, calls } = fakeExecute();
    const recorder = new LastUsedRecorder(execute, silent, 60_000);
    const now = vi.spyOn(Date, 'now').mockReturnValue(1_000_000);
    recorder.touch('key_a');
    expect(calls).toHaveLength(1);
    expect(calls[0]!.params).toEqual(['key_a', 60]);
    now.mockReturnValue(1_059_999);
    recorder.touch('key_a');
    expect(calls).toHaveLength(1);
    recorder.touch('key_b');
    expect(calls.map((c) => c.params[0])).toEqual(['key_a', 'key_b']);
    now.mockReturnValue(1_060_000);
    recorder.touch('key_a');
    expect(calls.map((c) => c.params[0])).toEqual(['key_a', 'key_b', 'key_a']);
  });

  it('tells the database the interval in whole seconds', () => {
    const { execute, calls } = fakeExecute();
    new LastUsedRecorder(execute, silent, 1_500).touch('key_a');
    expect(calls[0]!.params).toEqual(['key_a', 1]);
  });

  it('forgets what it wrote once it remembers more than 100,000 keys, and not before', () => {
    const { execute, calls } = fakeExecute();
    const recorder = new LastUsedRecorder(execute, silent, 60_000);
    vi.spyOn(Date, 'now').mockReturnValue(5_000_000);
    for (let i = 0; i < 100_000; i++) recorder.touch(`key_${i}`);
    expect(calls).toHaveLength(100_000);
    recorder.touch('key_0');
    expect(calls).toHaveLength(100_000);
    recorder.touch('key_100000');
    recorder.touch('key_0');
    expect(calls).toHaveLength(100_002);
  });

  it('a failed write is logged, not thrown', async () => {
    const warn = vi.fn();
    const recorder = new LastUsedRecorder((() => Promise.reject(new Error('database down'))) as Execute, { warn } as unknown as Logger, 60_000);
    expect(() => recorder.touch('key_a')).not.toThrow();
    await new Promise((resolve) => setImmediate(resolve));
    expect(warn).toHaveBeenCalledWith(expect.objectContaining({ keyId: 'key_a' }), expect.any(String));
  });
});

describe('key look-ups', () => {
  const row = (hash: string, paid = true): KeyRow => ({ key_hash: hash, key_id: 'key_1', account_id: 'acc_1', paid });

  it('refuses anything but SHA-256 hex hashes, before asking the database, for the whole batch', async () => {
    const { execute, calls } = fakeExecute();
    const keys = new KeyLookup(execute);
    const good = hashKey(generateKeySecret());
    await expect(keys.find('not-a-hash')).rejects.toThrow(/SHA-256 hex/);
    await expect(keys.find(`x${good}`)).rejects.toThrow(/SHA-256 hex/);
    await expect(keys.find(`${good}0`)).rejects.toThrow(/SHA-256 hex/);
    const both = await Promise.allSettled([keys.find(good), keys.find(good.toUpperCase())]);
    expect(both.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(calls).toHaveLength(0);
  });

  it('forgets the cached keys that match, and only those', async () => {
    const a = hashKey(generateKeySecret());
    const b = hashKey(generateKeySecret());
    const { execute, calls } = fakeExecute((_sql, params) => {
      const asked = String(params[0]).slice(1, -1).split(',');
      return asked.map((h) => ({ ...row(h), account_id: h === a ? 'acc_a' : 'acc_b' }));
    });
    const keys = new KeyLookup(execute);
    await keys.find(a);
    await keys.find(b);
    expect(await keys.findRecent(a)).toMatchObject({ fromCache: true });
    keys.forget((r) => r.account_id === 'acc_a');
    expect(await keys.findRecent(b)).toMatchObject({ fromCache: true });
    expect(await keys.findRecent(a)).toMatchObject({ fromCache: false, row: { account_id: 'acc_a' } });
    expect(calls).toHaveLength(3);
  });

  it('keeps at most cacheSize keys, each for cacheTtlMs', async () => {
    const [a, b] = [hashKey(generateKeySecret()), hashKey(generateKeySecret())];
    const { execute } = fakeExecute((_sql, params) => String(params[0]).slice(1, -1).split(',').map((h) => row(h)));
    const small = new KeyLookup(execute, { cacheSize: 1 });
    await small.find(a);
    await small.find(b);
    expect(await small.findRecent(b)).toMatchObject({ fromCache: true });
    expect(await small.findRecent(a)).toMatchObject({ fromCache: false });
    const brief = new KeyLookup(execute, { cacheTtlMs: 30 });
    await brief.find(a);
    expect(await brief.findRecent(a)).toMatchObject({ fromCache: true });
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(await brief.findRecent(a)).toMatchObject({ fromCache: false });
  });

  it('authenticate: a missing or malformed key is refused without a look-up; a key found is an api_key principal, from the database unless asked for the recent cache', async () => {
    const secret = generateKeySecret();
    const { execute, calls } = fakeExecute((_sql, params) => String(params[0]).slice(1, -1).split(',').map((h) => row(h)));
    const keys = new KeyLookup(execute);
    const lastUsed = { touch: vi.fn() } as unknown as LastUsedRecorder;
    await expect(authenticate(keys, null, lastUsed)).rejects.toMatchObject({ code: 'unauthorized', reason: 'invalid_api_key' });
    await expect(authenticate(keys, 'mas_not_a_key', lastUsed)).rejects.toMatchObject({ code: 'unauthorized', reason: 'invalid_api_key' });
    expect(calls).toHaveLength(0);
    expect(await authenticate(keys, secret, lastUsed)).toStrictEqual({ kind: 'api_key', accountId: 'acc_1', keyId: 'key_1', paid: true, fromCache: false });
    // Now in the cache: only a `recent` look-up may answer from it.
    expect(await authenticate(keys, secret, lastUsed)).toMatchObject({ fromCache: false });
    expect(await authenticate(keys, secret, lastUsed, { recent: true })).toMatchObject({ fromCache: true });
    expect(calls).toHaveLength(2);
    expect(lastUsed.touch).toHaveBeenCalledWith('key_1');
  });
});

describe('sign-in attempts', () => {
  /** Limiters that record the keys they count and answer with `state`. */
  function limiters(state: (key: string) => Partial<RateLimitState> = () => ({})) {
    const counted: string[] = [];
    const limiter: RateLimiter = {
      consume: async (key) => {
        counted.push(key);
        return { allowed: true, limit: 5, remaining: 4, resetSeconds: 60, ...state(key) };
      },
    };
    return { deps: { attempts: { perEmail: limiter, perIp: limiter } }, counted };
  }

  it('counts an email however it is typed (spaces, case) as one, and the client address apart', async () => {
    const { deps, counted } = limiters();
    await countAttempt(deps, 'signin', { email: '  Someone@Example.COM ', ip: '203.0.113.9' });
    await countAttempt(deps, 'signin', { email: 'someone@example.com' });
    expect(counted).toEqual(['signin:someone@example.com', 'signin:203.0.113.9', 'signin:someone@example.com']);
  });

  it('past the limit: refused with the wait in whole minutes, at least one, and the exact seconds to retry after', async () => {
    const refuse = (resetSeconds: number) => limiters((key) => (key.startsWith('login_link:') ? { allowed: false, resetSeconds } : {})).deps;
    await expect(countAttempt(refuse(600), 'login_link', { email: 'a@example.com' })).rejects.toMatchObject({
      code: 'rate_limited',
      reason: 'too_many_attempts',
      retryAfterSeconds: 600,
      message: 'Too many attempts. Try again in 10 minutes.',
    });
    await expect(countAttempt(refuse(61), 'login_link', { ip: '203.0.113.9' })).rejects.toMatchObject({ message: 'Too many attempts. Try again in 2 minutes.' });
    await expect(countAttempt(refuse(20), 'login_link', { ip: '203.0.113.9' })).rejects.toMatchObject({ message: 'Too many attempts. Try again in 1 minute.', retryAfterSeconds: 20 });
  });
});

describe('rate-limit windows (adapters/limits)', () => {
  it('allows the window its points, then refuses with what is left and when it frees', async () => {
    const limits = createLimiters({});
    const window = limits.window({ points: 2, durationSeconds: 60, prefix: `unit-${Date.now()}` });
    expect(await window.consume('k')).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    expect(await window.consume('k')).toMatchObject({ allowed: true, remaining: 0 });
    const refused = await window.consume('k');
    expect(refused).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
    // The window opened just now: it frees in (nearly) its whole minute.
    expect(refused.resetSeconds).toBeGreaterThanOrEqual(55);
    expect(refused.resetSeconds).toBeLessThanOrEqual(60);
    expect(await window.consume('other')).toMatchObject({ allowed: true });
    await expect(limits.close()).resolves.toBeUndefined();
  });

  it('with Redis unreachable, each process counts on its own at once, quietly', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const limits = createLimiters({ redisUrl: 'redis://127.0.0.1:1' });
    try {
      const window = limits.window({ points: 1, durationSeconds: 60, prefix: `unit-down-${Date.now()}` });
      const started = Date.now();
      expect(await window.consume('k')).toMatchObject({ allowed: true, limit: 1 });
      expect(await window.consume('k')).toMatchObject({ allowed: false });
      expect(Date.now() - started).toBeLessThan(3000);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(logged).not.toHaveBeenCalled();
    } finally {
      await limits.close();
    }
  }, 10_000);

  it('an error that is not a refusal is thrown, not counted as one', async () => {
    const window = createLimiters({}).window({ points: 2, durationSeconds: 60, prefix: 'unit-errors' });
    await expect(window.consume(Symbol('not a key') as unknown as string)).rejects.toThrow(TypeError);
  });
});
