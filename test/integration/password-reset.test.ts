import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret } from '../../core/auth/secrets.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { openTestOrm, testDeps, uniqueEmail } from '../support/db.ts';
import { tokenOf } from '../support/mail.ts';
import { refusal } from '../support/refusal.ts';
import { mailboxOf, signUpVerified } from '../support/sign-up.ts';

/** "Forgot your password?" through core: one answer for any e-mail, a 30-minute one-time link, every session ended. */
let orm: MikroORM;
let deps: CoreDeps;
beforeAll(async () => {
  orm = await openTestOrm();
  deps = testDeps(orm);
});
afterAll(() => orm.close());

const from = (ip: string, token: string | null = null) => createCaller(createContext(deps, { kind: 'session', token }, { clientIp: ip }));
const PASSWORD = 'the first password of this';
const NEW_PASSWORD = 'a brand new password here';
const resetMails = (email: string) => mailboxOf(deps).to(email).filter((m) => m.subject === 'Reset your password');
const alive = (token: string) =>
  from('192.0.2.1', token)
    .accounts.me()
    .then(
      () => true,
      (e: unknown) => (toCoreError(e)?.code === 'unauthorized' ? false : Promise.reject(e)),
    );

describe('password reset', () => {
  it('answers the same for an unknown e-mail, and mails only an existing account', async () => {
    const email = uniqueEmail('reset');
    await signUpVerified(deps, { email, password: PASSWORD });
    const unknown = uniqueEmail('nobody');
    const a = await from('203.0.113.20').accounts.requestPasswordReset({ email });
    const b = await from('203.0.113.20').accounts.requestPasswordReset({ email: unknown });
    expect(a).toEqual({ object: 'password_reset', email, mail_sent: true });
    expect(b).toEqual({ object: 'password_reset', email: unknown, mail_sent: true });
    expect(resetMails(email)).toHaveLength(1);
    expect(mailboxOf(deps).to(unknown)).toHaveLength(0);
    expect(resetMails(email)[0]!.link).toMatch(/^http:\/\/localhost\/password\/reset\?token=mas_reset_/);
  });

  it('the link is stored hashed for 30 minutes, works once, sets the password, ends every session and signs in', async () => {
    const email = uniqueEmail('reset-once');
    const first = await signUpVerified(deps, { email, password: PASSWORD });
    const other = await from('192.0.2.2').accounts.signIn({ email, password: PASSWORD });
    await from('203.0.113.21').accounts.requestPasswordReset({ email: email.toUpperCase() });
    const token = tokenOf(resetMails(email).at(-1)!.link!);
    const [stored] = await orm.em.fork().execute<{ token_hash: string; seconds: number; used_at: Date | null }[]>(
      "select token_hash, extract(epoch from expires_at - created_at)::int as seconds, used_at from account_tokens where account_id = ? and purpose = 'reset_password'",
      [first.account.id],
    );
    expect(stored).toEqual({ token_hash: hashSecret(token), seconds: 30 * 60, used_at: null });
    expect(await from('203.0.113.21').accounts.checkResetLink({ token })).toEqual({ object: 'password_reset_link', valid: true });
    // A password that breaks a rule is refused, and the link still works.
    expect(await refusal(from('203.0.113.21').accounts.resetPassword({ token, new_password: 'short' }))).toMatchObject({ param: 'new_password', reason: 'password_too_short' });
    const signedIn = await from('203.0.113.21').accounts.resetPassword({ token, new_password: NEW_PASSWORD });
    expect(signedIn).toMatchObject({ object: 'session', account: { id: first.account.id } });
    expect(await alive(signedIn.token)).toBe(true);
    expect(await alive(first.token)).toBe(false);
    expect(await alive(other.token)).toBe(false);
    expect(await refusal(from('192.0.2.3').accounts.signIn({ email, password: PASSWORD }))).toMatchObject({ reason: 'invalid_credentials' });
    await expect(from('192.0.2.3').accounts.signIn({ email, password: NEW_PASSWORD })).resolves.toMatchObject({ object: 'session' });
    // Used: refused, by the check and by the reset.
    expect(await refusal(from('203.0.113.21').accounts.checkResetLink({ token }))).toMatchObject({ code: 'invalid_request', reason: 'invalid_reset_link', param: 'token' });
    expect(await refusal(from('203.0.113.21').accounts.resetPassword({ token, new_password: 'yet another new password' }))).toMatchObject({ reason: 'invalid_reset_link' });
  });

  it('refuses a link past its 30 minutes, and a malformed or unknown one, alike', async () => {
    const email = uniqueEmail('reset-late');
    const first = await signUpVerified(deps, { email, password: PASSWORD });
    await from('203.0.113.22').accounts.requestPasswordReset({ email });
    const token = tokenOf(resetMails(email).at(-1)!.link!);
    await orm.em.fork().execute(`update account_tokens set expires_at = now() - interval '1 second' where account_id = ? and purpose = 'reset_password'`, [first.account.id]);
    const late = await refusal(from('203.0.113.22').accounts.resetPassword({ token, new_password: NEW_PASSWORD }));
    expect(late).toMatchObject({ code: 'invalid_request', reason: 'invalid_reset_link' });
    expect(late.message).not.toContain(token);
    for (const bad of ['mas_reset_unknown', 'nonsense', `mas_verify_${token.slice(10)}`]) {
      expect(await refusal(from('203.0.113.22').accounts.resetPassword({ token: bad, new_password: NEW_PASSWORD })), bad).toEqual(late);
    }
    await expect(from('192.0.2.4').accounts.signIn({ email, password: PASSWORD })).resolves.toMatchObject({ object: 'session' });
  });

  it('confirms an unconfirmed address (the mail reached it)', async () => {
    const email = uniqueEmail('reset-unconfirmed');
    await from('203.0.113.23').accounts.signUp({ email, password: PASSWORD });
    await from('203.0.113.23').accounts.requestPasswordReset({ email });
    const signedIn = await from('203.0.113.23').accounts.resetPassword({ token: tokenOf(resetMails(email).at(-1)!.link!), new_password: NEW_PASSWORD });
    expect(await from('203.0.113.23', signedIn.token).accounts.me()).toMatchObject({ email_verified: true });
  });

  it('limits requests per e-mail and per address', async () => {
    const email = uniqueEmail('reset-flood');
    for (let i = 0; i < 10; i++) await from(`198.51.100.${i}`).accounts.requestPasswordReset({ email });
    const perEmail = await refusal(from('198.51.100.200').accounts.requestPasswordReset({ email }));
    expect(perEmail).toMatchObject({ code: 'rate_limited', reason: 'too_many_attempts' });
    expect(perEmail.retryAfterSeconds).toBeGreaterThan(0);
    for (let i = 0; i < 30; i++) await from('198.51.100.201').accounts.requestPasswordReset({ email: uniqueEmail('spray') });
    expect(await refusal(from('198.51.100.201').accounts.requestPasswordReset({ email: uniqueEmail('spray') }))).toMatchObject({ reason: 'too_many_attempts' });
  });
});
