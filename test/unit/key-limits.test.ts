import { describe, expect, it, vi } from 'vitest';
import { authenticate, KeyLookup, type KeyRow, type LastUsedRecorder } from '../../core/auth/api-keys.ts';
import { requireModelAllowed, type KeyPrincipal } from '../../core/auth/principals.ts';
import type { Execute } from '../../core/db/batch.ts';
import { generateKeySecret } from '../../core/keys/key-secret.ts';
import { parseKeyLimits } from '../../core/keys/limits.ts';
import { reserveOutcome } from '../../core/money/holds.ts';

/** The TypeScript side of key limits: expiry at the door, allowed models, the refusal's phrasing, the limit fields' rules. */
const keyRows = (extra: Partial<KeyRow>): Execute =>
  (async (_sql: string, params: unknown[]) =>
    String(params[0])
      .slice(1, -1)
      .split(',')
      .map((h) => ({ key_hash: h, key_id: 'key_1', account_id: 'acc_1', paid: true, ...extra }))) as unknown as Execute;
const lastUsed = () => ({ touch: vi.fn() }) as unknown as LastUsedRecorder & { touch: ReturnType<typeof vi.fn> };

describe('authenticate and a key’s expiry', () => {
  const now = new Date('2027-03-01T12:00:00Z');

  it('refuses a key at or past its expiry with api_key_expired, saying when; before it, the key passes', async () => {
    const secret = generateKeySecret();
    const recorder = lastUsed();
    const at = (iso: string) => new KeyLookup(keyRows({ expires_at: iso }));
    await expect(authenticate(at('2027-03-01T12:00:00.000Z'), secret, recorder, { now })).rejects.toMatchObject({
      code: 'unauthorized',
      reason: 'api_key_expired',
      message: expect.stringContaining('expired on 2027-03-01T12:00:00.000Z'),
    });
    await expect(authenticate(at('2027-03-01T11:59:59.999Z'), secret, recorder, { now })).rejects.toMatchObject({ reason: 'api_key_expired' });
    expect(recorder.touch).not.toHaveBeenCalled();
    await expect(authenticate(at('2027-03-01T12:00:00.001Z'), secret, recorder, { now })).resolves.toMatchObject({ keyId: 'key_1' });
    // A Date from the driver works as well as text.
    await expect(authenticate(new KeyLookup(keyRows({ expires_at: new Date('2027-02-01T00:00:00Z') })), secret, recorder, { now })).rejects.toMatchObject({ reason: 'api_key_expired' });
    await expect(authenticate(new KeyLookup(keyRows({ expires_at: null })), secret, recorder, { now })).resolves.toMatchObject({ keyId: 'key_1' });
  });

  it('checks the expiry of a key from the cache of recent look-ups too', async () => {
    const secret = generateKeySecret();
    const keys = new KeyLookup(keyRows({ expires_at: '2027-03-01T12:00:00Z' }));
    await authenticate(keys, secret, lastUsed(), { now: new Date('2027-03-01T11:00:00Z') });
    await expect(authenticate(keys, secret, lastUsed(), { recent: true, now })).rejects.toMatchObject({ reason: 'api_key_expired' });
  });

  it('carries the allowed models into the principal; none listed: no list', async () => {
    const secret = generateKeySecret();
    expect(await authenticate(new KeyLookup(keyRows({ allowed_models: ['a/b'] })), secret, lastUsed())).toMatchObject({ allowedModels: ['a/b'] });
    expect(await authenticate(new KeyLookup(keyRows({ allowed_models: [] })), secret, lastUsed())).not.toHaveProperty('allowedModels');
    expect(await authenticate(new KeyLookup(keyRows({ allowed_models: null })), secret, lastUsed())).not.toHaveProperty('allowedModels');
  });
});

describe('requireModelAllowed', () => {
  const key = (allowedModels?: string[]): KeyPrincipal => ({ kind: 'api_key', accountId: 'acc_1', keyId: 'key_1', paid: true, fromCache: false, ...(allowedModels ? { allowedModels } : {}) });

  it('lets a listed model through, and every model when the key lists none', () => {
    expect(() => requireModelAllowed(key(['a/b', 'c/d']), 'c/d')).not.toThrow();
    expect(() => requireModelAllowed(key(), 'x/y')).not.toThrow();
  });

  it('refuses another model with forbidden / model_not_allowed on the model field, naming it and the list', () => {
    let err: unknown;
    try {
      requireModelAllowed(key(['a/b', 'c/d']), 'x/y');
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'forbidden', reason: 'model_not_allowed', param: 'model' });
    expect((err as Error).message).toBe("This API key may not use the model 'x/y'. It may use: a/b, c/d. The account owner can change the key's models on the API keys page.");
  });

  it('an app connection has no model list', () => {
    expect(() =>
      requireModelAllowed({ kind: 'app_connection', accountId: 'acc_1', connectionId: 'conn_1', keyId: 'key_1', paid: true, fromCache: false, spendCapMicro: null, expiresAt: null }, 'x/y'),
    ).not.toThrow();
  });
});

describe('the spend-limit refusal', () => {
  it('is spend_cap_reached with reason key_spend_limit_reached, naming what the request needs and what is left', () => {
    const input = { accountId: 'acc_1', amount: 51n, reference: 'r', expiresAt: new Date() };
    let err: unknown;
    try {
      reserveOutcome({ status: 'key_spend_limit_reached', available: '37' }, input, 'hold_1');
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'spend_cap_reached', reason: 'key_spend_limit_reached', params: { needed_coins: '0.000051', remaining_coins: '0.000037' } });
    expect((err as Error).message).toBe(
      "This API key's spend limit is reached: this request needs 0.000051 coins and 0.000037 are left under the key's limit. The account owner can raise the key's limit on the API keys page.",
    );
    expect(() => reserveOutcome({ status: 'key_spend_limit_reached', available: null }, input, 'hold_1')).toThrow(/and 0 are left/);
  });
});

describe('parseKeyLimits', () => {
  const now = new Date('2027-03-01T12:00:00Z');
  const known = new Set(['a/b', 'c/d']);
  const checks = { now, knownModel: (id: string) => Promise.resolve(known.has(id)) };

  it('leaves out what was not sent, and turns what was into stored values', async () => {
    expect(await parseKeyLimits({}, checks)).toEqual({});
    expect(await parseKeyLimits({ spend_limit_coins: '12.5' }, checks)).toEqual({ spendLimitMicro: 12_500_000n, spendLimitPeriod: 'total' });
    expect(await parseKeyLimits({ spend_limit_coins: 3, spend_limit_period: 'monthly' }, checks)).toEqual({ spendLimitMicro: 3_000_000n, spendLimitPeriod: 'monthly' });
    // An update keeps the period the key has when only the amount changes, and may change the period alone.
    expect(await parseKeyLimits({ spend_limit_coins: '1' }, { ...checks, currentPeriod: 'monthly' })).toEqual({ spendLimitMicro: 1_000_000n, spendLimitPeriod: 'monthly' });
    expect(await parseKeyLimits({ spend_limit_period: 'total' }, { ...checks, currentPeriod: 'monthly' })).toEqual({ spendLimitPeriod: 'total' });
    expect(await parseKeyLimits({ spend_limit_coins: null, expires_at: '', allowed_models: [] }, checks)).toEqual({ spendLimitMicro: null, spendLimitPeriod: null, expiresAt: null, allowedModels: null });
    expect(await parseKeyLimits({ spend_limit_coins: '' }, checks)).toEqual({ spendLimitMicro: null, spendLimitPeriod: null });
    expect(await parseKeyLimits({ allowed_models: ['c/d', 'a/b', 'c/d'] }, checks)).toEqual({ allowedModels: ['a/b', 'c/d'] });
    expect(await parseKeyLimits({ allowed_models: null }, checks)).toEqual({ allowedModels: null });
  });

  it('reads an expiry date as the end of that day (UTC), or a date and time with its zone', async () => {
    expect(await parseKeyLimits({ expires_at: '2027-03-01' }, checks)).toEqual({ expiresAt: new Date('2027-03-01T23:59:59.999Z') });
    expect(await parseKeyLimits({ expires_at: '2027-03-01T12:00:01Z' }, checks)).toEqual({ expiresAt: new Date('2027-03-01T12:00:01Z') });
    expect(await parseKeyLimits({ expires_at: '2027-03-01T14:00:01+02:00' }, checks)).toEqual({ expiresAt: new Date('2027-03-01T12:00:01Z') });
    expect(await parseKeyLimits({ expires_at: '2027-03-01T12:00:01.5Z' }, checks)).toEqual({ expiresAt: new Date('2027-03-01T12:00:01.500Z') });
  });

  it.each([
    [{ spend_limit_coins: '0' }, 'spend_limit_coins', /more than 0/],
    [{ spend_limit_coins: 'ten' }, 'spend_limit_coins', /number of coins/],
    [{ spend_limit_coins: '100000000.000001' }, 'spend_limit_coins', /at most 100000000 coins/],
    [{ spend_limit_period: 'monthly' }, 'spend_limit_period', /needs a spend limit/],
    [{ expires_at: '2027-03-01T12:00:00Z' }, 'expires_at', /in the future/],
    [{ expires_at: '2027-02-28' }, 'expires_at', /in the future/],
    [{ expires_at: '2027-02-29' }, 'expires_at', /a date such as/],
    [{ expires_at: '2027-03-01T13:00:00' }, 'expires_at', /with its zone/],
    [{ expires_at: 'soon' }, 'expires_at', /a date such as/],
    [{ allowed_models: ['a/b', 'z/z'] }, 'allowed_models.1', /'z\/z' does not exist/],
  ] as const)('refuses %j naming %s', async (input, param, message) => {
    await expect(parseKeyLimits(input as never, checks)).rejects.toMatchObject({ code: 'invalid_request', param, message: expect.stringMatching(message) });
  });

  it('accepts the largest limit exactly', async () => {
    expect(await parseKeyLimits({ spend_limit_coins: '100000000' }, checks)).toMatchObject({ spendLimitMicro: 100_000_000_000_000n });
  });
});
