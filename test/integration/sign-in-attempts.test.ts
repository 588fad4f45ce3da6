import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { refusal } from '../support/refusal.ts';

/** Guessing passwords is slowed down per email and per client address (rate-limiter-flexible, in core's rules). */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm.close());

const from = (ip: string) => createCaller(createContext(deps, { kind: 'none' }, { clientIp: ip }));
const password = 'a sound password for tests';

describe('sign-in attempts', () => {
  it('after 10 attempts on one email in 15 minutes, every attempt is refused, the right password too', async () => {
    const email = uniqueEmail('guess');
    await from('203.0.113.1').accounts.signUp({ email, password });
    for (let i = 0; i < 9; i++) {
      expect((await refusal(from(`198.51.100.${i}`).accounts.signIn({ email, password: 'wrong guess number ' + i })))?.reason).toBe('invalid_credentials');
    }
    // The 10th attempt, right: allowed. The 11th, right again: refused, whatever the address.
    await expect(from('198.51.100.50').accounts.signIn({ email, password })).resolves.toMatchObject({ object: 'session' });
    const refused = await refusal(from('198.51.100.51').accounts.signIn({ email, password }));
    expect(refused).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    expect(refused!.retryAfterSeconds).toBeGreaterThan(0);
    expect(refused!.message).toMatch(/Too many attempts/);
    expect(refused!.message).not.toContain(password);
  });

  it('counts an email in any case against one limit: Alice@Example.com and alice@example.com are the same', async () => {
    const email = uniqueEmail('casing');
    const [local, domain] = email.split('@') as [string, string];
    const shouted = `${local.charAt(0).toUpperCase()}${local.slice(1)}@${domain.toUpperCase()}`;
    expect(shouted).not.toBe(email);
    expect(shouted.toLowerCase()).toBe(email);
    await from('203.0.113.2').accounts.signUp({ email, password });
    // 10 attempts, alternating the two spellings, each from its own address: all counted, none refused yet.
    for (let i = 0; i < 10; i++) {
      const spelling = i % 2 === 0 ? email : shouted;
      expect((await refusal(from(`198.51.100.${100 + i}`).accounts.signIn({ email: spelling, password: 'wrong guess number ' + i })))?.reason).toBe('invalid_credentials');
    }
    // The 11th, right, in either spelling (or a third one): refused, as 11 attempts on one email.
    for (const [i, spelling] of [shouted, email, email.toUpperCase()].entries()) {
      expect(await refusal(from(`198.51.100.${120 + i}`).accounts.signIn({ email: spelling, password })), spelling).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    }
  });

  it('after 30 attempts from one address, that address is refused for any email; others are not', async () => {
    for (let i = 0; i < 30; i++) await refusal(from('192.0.2.7').accounts.signIn({ email: uniqueEmail('spray'), password }));
    expect(await refusal(from('192.0.2.7').accounts.signIn({ email: uniqueEmail('spray'), password }))).toMatchObject({ reason: 'too_many_attempts' });
    expect(await refusal(from('192.0.2.8').accounts.signIn({ email: uniqueEmail('spray'), password }))).toMatchObject({ reason: 'invalid_credentials' });
  });
});
