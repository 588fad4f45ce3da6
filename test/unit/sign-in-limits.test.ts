import { createHmac } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { createLimiters } from '../../adapters/limits/rate-limiter.ts';
import { checkSignInAllowed, PAIR_FIRST_BLOCK_SECONDS, PAIR_FREE_FAILURES, PER_EMAIL_FAILURES, PER_IP_FAILURES, signInFailed, signInSucceeded, tooManyAttempts, type SignInLimits } from '../../core/accounts/attempts.ts';
import type { FailureCounter } from '../../core/ports.ts';
import { DEVICE_COOKIE_SECONDS, deviceCookies } from '../../core/auth/device-cookies.ts';

/**
 * The sign-in limits' policy (core/accounts/attempts.ts) over the real in-memory counters
 * (adapters/limits/rate-limiter.ts), and the device cookie's signature and age.
 */
const limits = (): SignInLimits => {
  const l = createLimiters({});
  return {
    pair: l.failures({ prefix: 'pair', forgetSeconds: 86_400 }),
    perIp: l.failures({ prefix: 'ip', forgetSeconds: 900 }),
    perEmail: l.failures({ prefix: 'email', forgetSeconds: 900 }),
  };
};
const who = (email: string, ip: string | undefined, trustedDevice = false) => ({ email, ip, trustedDevice });
const refusedFor = async (l: SignInLimits, w: ReturnType<typeof who>) =>
  checkSignInAllowed(l, w).then(
    () => 0,
    (e: { retryAfterSeconds: number }) => e.retryAfterSeconds,
  );

describe('failure counters', () => {
  it('count, block for a time, and forget at reset', async () => {
    const c = createLimiters({}).failures({ prefix: 't', forgetSeconds: 60 });
    expect(await c.blockedFor('k')).toBe(0);
    expect(await c.fail('k')).toBe(1);
    expect(await c.fail('k')).toBe(2);
    expect(await c.fail('other')).toBe(1);
    await c.block('k', 120);
    const left = await c.blockedFor('k');
    expect(left).toBeGreaterThan(110);
    expect(left).toBeLessThanOrEqual(120);
    expect(await c.blockedFor('other')).toBe(0);
    await c.reset('k');
    expect(await c.blockedFor('k')).toBe(0);
    expect(await c.fail('k')).toBe(1);
  });

  it('count a block as over at its last millisecond, even while the store still keeps it', async () => {
    // The in-memory store drops a block by a timer; the clock alone says whether it still holds.
    vi.useFakeTimers({ now: new Date('2026-11-28T00:00:00Z') });
    try {
      const c = createLimiters({}).failures({ prefix: 't', forgetSeconds: 60 });
      await c.block('k', 120);
      vi.setSystemTime(Date.now() + 120_000 - 1);
      expect(await c.blockedFor('k')).toBe(1);
      vi.setSystemTime(Date.now() + 1);
      expect(await c.blockedFor('k')).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('sign-in policy', () => {
  it('blocks the pair from the fifth failure, for 60 then 120 seconds, and a success clears it', async () => {
    const l = limits();
    const w = who('A@Example.com ', '192.0.2.1');
    for (let i = 0; i < 4; i++) await signInFailed(l, w);
    expect(await refusedFor(l, w)).toBe(0);
    await signInFailed(l, w);
    const first = await refusedFor(l, who('a@example.com', '192.0.2.1'));
    expect(first).toBeGreaterThan(50);
    expect(first).toBeLessThanOrEqual(60);
    // Another address, the same e-mail: free.
    expect(await refusedFor(l, who('a@example.com', '192.0.2.2'))).toBe(0);
    await signInFailed(l, w);
    expect(await refusedFor(l, w)).toBeGreaterThan(60);
    await signInSucceeded(l, w);
    expect(await refusedFor(l, w)).toBe(0);
  });

  it('blocks an address after its failures across e-mails, and an e-mail after its failures across addresses, except for a trusted device', async () => {
    const l = limits();
    for (let i = 0; i < PER_IP_FAILURES - 1; i++) await signInFailed(l, who(`u${i}@example.com`, '198.51.100.1'));
    expect(await refusedFor(l, who('new@example.com', '198.51.100.1'))).toBe(0);
    await signInFailed(l, who('last@example.com', '198.51.100.1'));
    expect(await refusedFor(l, who('new@example.com', '198.51.100.1'))).toBeGreaterThan(800);

    for (let i = 0; i < PER_EMAIL_FAILURES - 1; i++) await signInFailed(l, who('target@example.com', `10.0.${i}.1`));
    expect(await refusedFor(l, who('target@example.com', '10.9.9.9'))).toBe(0);
    await signInFailed(l, who('target@example.com', '10.0.200.1'));
    expect(await refusedFor(l, who('target@example.com', '10.9.9.9'))).toBeGreaterThan(800);
    expect(await refusedFor(l, who('target@example.com', '10.9.9.9', true))).toBe(0);
  });

  it('writes no block before the pair\'s fifth failure (a block of 0 seconds would be a record kept with no end), then one of a minute', async () => {
    const l = limits();
    const blocks: [string, number][] = [];
    const pair: FailureCounter = l.pair;
    l.pair = { ...pair, block: (key, seconds) => (blocks.push([key, seconds]), pair.block(key, seconds)) };
    const w = who('quiet@example.com', '192.0.2.9');
    for (let i = 0; i < PAIR_FREE_FAILURES - 1; i++) await signInFailed(l, w);
    expect(blocks).toEqual([]);
    await signInFailed(l, w);
    expect(blocks).toEqual([['quiet@example.com|192.0.2.9', PAIR_FIRST_BLOCK_SECONDS]]);
  });

  it('keeps apart e-mails that only upper case would merge (straße and strasse are two accounts: the database compares lower(email))', async () => {
    const l = limits();
    for (let i = 0; i < PAIR_FREE_FAILURES; i++) await signInFailed(l, who('straße@example.com', '192.0.2.7'));
    expect(await refusedFor(l, who('Straße@example.com', '192.0.2.7'))).toBeGreaterThan(0);
    expect(await refusedFor(l, who('strasse@example.com', '192.0.2.7'))).toBe(0);
  });

  it('without an address counts the e-mail alone', async () => {
    const l = limits();
    for (let i = 0; i < 5; i++) await signInFailed(l, who('noip@example.com', undefined));
    expect(await refusedFor(l, who('noip@example.com', undefined))).toBeGreaterThan(0);
  });

  it('says the wait in minutes, rounded up', () => {
    expect(tooManyAttempts(1).message).toBe('Too many attempts. Try again in 1 minute.');
    expect(tooManyAttempts(61).message).toBe('Too many attempts. Try again in 2 minutes.');
    expect(tooManyAttempts(900)).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts', retryAfterSeconds: 900, message: 'Too many attempts. Try again in 15 minutes.' });
  });
});

describe('device cookies', () => {
  const devices = deviceCookies('a secret of the test, long enough');
  const now = new Date('2026-11-28T00:00:00Z');

  it('name the account they were issued for, while young enough', () => {
    const token = devices.issue('acct_123', now);
    expect(token).toMatch(/^d1\.acct_123\.\d+\.[\w-]+$/);
    expect(devices.accountOf(token, now)).toBe('acct_123');
    expect(devices.accountOf(token, new Date(now.getTime() + DEVICE_COOKIE_SECONDS * 1000))).toBe('acct_123');
    expect(devices.accountOf(token, new Date(now.getTime() + DEVICE_COOKIE_SECONDS * 1000 + 1000))).toBeNull();
  });

  it('refuse anything tampered with, from another secret, malformed or from the future', () => {
    const token = devices.issue('acct_123', now);
    const [v, account, issued, mac] = token.split('.') as [string, string, string, string];
    expect(devices.accountOf(`${v}.acct_124.${issued}.${mac}`, now)).toBeNull();
    expect(devices.accountOf(`${v}.${account}.${Number(issued) + 1}.${mac}`, now)).toBeNull();
    expect(devices.accountOf(`d2.${account}.${issued}.${mac}`, now)).toBeNull();
    expect(devices.accountOf(`${token}x`, now)).toBeNull();
    expect(deviceCookies('another secret entirely, long').accountOf(token, now)).toBeNull();
    for (const bad of [null, undefined, '', 'd1', 'd1.a.b', 'x'.repeat(400), `${token}.extra`]) expect(devices.accountOf(bad, now), String(bad)).toBeNull();
    expect(devices.accountOf(devices.issue('acct_123', new Date(now.getTime() + 3600_000)), now)).toBeNull();
    expect(devices.accountOf(devices.issue('acct_123', new Date(now.getTime() + 30_000)), now)).toBe('acct_123');
  });

  it('take a token of up to 300 characters, and a clock up to a minute ahead, not more', () => {
    // d1.<account>.<10 digits>.<43 characters of HMAC>: 58 characters beside the account id.
    const at300 = devices.issue('a'.repeat(242), now);
    const at301 = devices.issue('a'.repeat(243), now);
    expect([at300.length, at301.length]).toEqual([300, 301]);
    expect(devices.accountOf(at300, now)).toBe('a'.repeat(242));
    expect(devices.accountOf(at301, now)).toBeNull();
    expect(devices.accountOf(devices.issue('acct_123', new Date(now.getTime() + 60_000)), now)).toBe('acct_123');
    expect(devices.accountOf(devices.issue('acct_123', new Date(now.getTime() + 61_000)), now)).toBeNull();
  });

  it('refuse a well-signed token of another version or with an issue time that is not plain digits', () => {
    // Signed as the service signs (HMAC-SHA256 of `device:<body>` under the secret): only the parsing can refuse these.
    const signed = (body: string) => `${body}.${createHmac('sha256', 'a secret of the test, long enough').update(`device:${body}`).digest('base64url')}`;
    const seconds = Math.floor(now.getTime() / 1000);
    expect(devices.accountOf(signed(`d1.acct_123.${seconds}`), now)).toBe('acct_123');
    for (const body of [`d2.acct_123.${seconds}`, `d1.acct_123.+${seconds}`, `d1.acct_123.${seconds}e0`, `d1.acct_123. ${seconds}`, `d1.acct_123.${seconds} `]) {
      expect(devices.accountOf(signed(body), now), body).toBeNull();
    }
  });
});
