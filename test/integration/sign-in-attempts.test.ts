import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BLOCK_SECONDS, PAIR_FREE_FAILURES, PER_EMAIL_FAILURES, PER_IP_FAILURES, pairBlockSeconds } from '../../core/accounts/attempts.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';
import { signUpVerified } from '../support/sign-up.ts';

/**
 * Sign-in limits (issue 34, docs/accounts.md "Sign-in limits"): failures count per (e-mail,
 * address) pair with growing blocks, per address across e-mails, and per e-mail across
 * addresses, which a browser holding the account's device cookie skips. Guessing someone's
 * password never locks the owner out.
 */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm.close());

const from = (ip: string, device?: string) => createCaller(createContext(deps, { kind: 'none' }, { clientIp: ip, device }));
const password = 'a sound password for tests';
const wrong = (i: number) => `wrong guess number ${i}`;

describe('the policy', () => {
  it('blocks a pair after 5 consecutive failures for a minute, then doubles up to 15 minutes', () => {
    expect([1, 2, 3, 4].map(pairBlockSeconds)).toEqual([0, 0, 0, 0]);
    expect(PAIR_FREE_FAILURES).toBe(5);
    expect([5, 6, 7, 8, 9, 10, 50].map(pairBlockSeconds)).toEqual([60, 120, 240, 480, 900, 900, MAX_BLOCK_SECONDS]);
  });
});

describe('sign-in attempts', () => {
  it("10 wrong passwords for the victim from one address do not lock the owner out elsewhere; the attacker's pair gets 429 with a Retry-After", async () => {
    const email = uniqueEmail('victim');
    await signUpVerified(deps, { email, password }, { clientIp: '203.0.113.1' });
    const attacker = '198.51.100.66';
    const answers = [];
    for (let i = 0; i < 10; i++) answers.push(await refusal(from(attacker).accounts.signIn({ email, password: wrong(i) })));
    // Five wrong answers, then the pair is refused, and stays refused with the right password too.
    expect(answers.slice(0, PAIR_FREE_FAILURES).map((a) => a.reason)).toEqual(Array(PAIR_FREE_FAILURES).fill('invalid_credentials'));
    for (const a of answers.slice(PAIR_FREE_FAILURES)) expect(a).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    const refused = await refusal(from(attacker).accounts.signIn({ email, password }));
    expect(refused).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts', message: 'Too many attempts. Try again in 1 minute.' });
    expect(refused.retryAfterSeconds).toBeGreaterThan(0);
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(60);
    expect(refused.message).not.toContain(password);
    // The owner, from another address: signed in.
    await expect(from('192.0.2.10').accounts.signIn({ email, password })).resolves.toMatchObject({ object: 'session' });
  });

  it('the same refusal for an unknown e-mail as for a wrong password', async () => {
    const known = uniqueEmail('known');
    await signUpVerified(deps, { email: known, password });
    const unknown = uniqueEmail('unknown');
    const refusals = async (email: string, ip: string) => {
      for (let i = 0; i < PAIR_FREE_FAILURES; i++) await refusal(from(ip).accounts.signIn({ email, password: wrong(i) }));
      const r = await refusal(from(ip).accounts.signIn({ email, password: wrong(99) }));
      return { code: r.code, reason: r.reason, message: r.message, param: r.param };
    };
    expect(await refusals(known, '198.51.100.70')).toEqual(await refusals(unknown, '198.51.100.71'));
  });

  it('a success forgets the pair: four failures, the right password, four failures again, and no block', async () => {
    const email = uniqueEmail('forgetful');
    await signUpVerified(deps, { email, password });
    const ip = '198.51.100.80';
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < PAIR_FREE_FAILURES - 1; i++) expect((await refusal(from(ip).accounts.signIn({ email, password: wrong(i) }))).reason).toBe('invalid_credentials');
      await expect(from(ip).accounts.signIn({ email, password })).resolves.toMatchObject({ object: 'session' });
    }
  });

  it('counts an e-mail in any case as one: Alice@Example.com and alice@example.com share the pair', async () => {
    const email = uniqueEmail('casing');
    await signUpVerified(deps, { email, password });
    const [local, domain] = email.split('@') as [string, string];
    const shouted = `${local.charAt(0).toUpperCase()}${local.slice(1)}@${domain.toUpperCase()}`;
    expect(shouted).not.toBe(email);
    for (let i = 0; i < PAIR_FREE_FAILURES; i++) await refusal(from('198.51.100.90').accounts.signIn({ email: i % 2 ? email : shouted, password: wrong(i) }));
    expect(await refusal(from('198.51.100.90').accounts.signIn({ email: email.toUpperCase(), password }))).toMatchObject({ reason: 'too_many_attempts' });
  });

  it(`after ${PER_IP_FAILURES} failures from one address, that address is refused for any e-mail; others are not`, async () => {
    for (let i = 0; i < PER_IP_FAILURES; i++) await refusal(from('192.0.2.7').accounts.signIn({ email: uniqueEmail('spray'), password }));
    expect(await refusal(from('192.0.2.7').accounts.signIn({ email: uniqueEmail('spray'), password }))).toMatchObject({ reason: 'too_many_attempts' });
    expect(await refusal(from('192.0.2.8').accounts.signIn({ email: uniqueEmail('spray'), password }))).toMatchObject({ reason: 'invalid_credentials' });
  });

  it(`after ${PER_EMAIL_FAILURES} failures on one e-mail from many addresses, the e-mail is locked, except to a browser with its device cookie`, async () => {
    const email = uniqueEmail('besieged');
    const owner = await signUpVerified(deps, { email, password }, { clientIp: '203.0.113.5' });
    expect(owner.device_token).toMatch(/^d1\./);
    // A botnet: 4 tries from each of many addresses (under the pair's limit).
    for (let i = 0; i < PER_EMAIL_FAILURES; i++) await refusal(from(`10.${Math.floor(i / 4)}.0.1`).accounts.signIn({ email, password: wrong(i) }));
    // A new address without the cookie: refused, the right password too, with the wait.
    const locked = await refusal(from('10.200.0.1').accounts.signIn({ email, password }));
    expect(locked).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    expect(locked.retryAfterSeconds).toBeGreaterThan(60);
    // The owner's browser, from yet another address, with its device cookie: signed in.
    await expect(from('10.201.0.1', owner.device_token).accounts.signIn({ email, password })).resolves.toMatchObject({ object: 'session' });
    // A device cookie of another account, or a forged one, does not open the lock.
    const other = await signUpVerified(deps, { email: uniqueEmail('other'), password });
    expect(await refusal(from('10.202.0.1', other.device_token).accounts.signIn({ email, password }))).toMatchObject({ reason: 'too_many_attempts' });
    const forged = owner.device_token.replace(/\.[^.]+$/, '.AAAA');
    expect(await refusal(from('10.203.0.1', forged).accounts.signIn({ email, password }))).toMatchObject({ reason: 'too_many_attempts' });
  });

  it('a device cookie does not lift the pair limit', async () => {
    const email = uniqueEmail('device-pair');
    const owner = await signUpVerified(deps, { email, password });
    const ip = '198.51.100.120';
    for (let i = 0; i < PAIR_FREE_FAILURES; i++) await refusal(from(ip, owner.device_token).accounts.signIn({ email, password: wrong(i) }));
    expect(await refusal(from(ip, owner.device_token).accounts.signIn({ email, password }))).toMatchObject({ reason: 'too_many_attempts' });
  });
});
