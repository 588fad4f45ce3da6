import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { consumeLoginToken } from '../auth/login-links.ts';
import type { Credential, SessionPrincipal } from '../auth/principals.ts';
import { endAllSessions, endSession, endSessionByToken, startSession } from '../auth/sessions.ts';
import { CoreError, notFound } from '../errors.ts';
import type { Clock, RateLimiter } from '../ports.ts';
import type { DeviceCookies } from '../auth/device-cookies.ts';
import { checkSignInAllowed, countAttempt, signInFailed, signInSucceeded, type SignInLimits } from './attempts.ts';
import { consumeAccountToken, createAccountToken, peekAccountToken } from './account-tokens.ts';
import { accountExistsMail, passwordResetMail, sendLater, verificationMail, type AccountLinks } from './mails.ts';
import type { Logger } from 'pino';
import type { Mailer } from '../ports.ts';
import { isoTimeSchema } from '../views.ts';
import { Account } from './account.entity.ts';
import { accountView, createAccount, createAccountInput } from './accounts.ts';
import { checkNewPassword, hashPassword, needsRehash, passwordInput, verifyPassword } from './passwords.ts';
import { confirmEmail } from './welcome-credit.ts';
import type { Micro } from '../money/coins.ts';

/**
 * The account pages' ways in and out: sign-up (then the e-mail's confirmation link), sign-in
 * (a password or an operator's login link), a password reset through a mailed link, sign-out
 * and a password change. Each way in starts a new session and answers its token once (the
 * pages put it in the cookie), with a device cookie (core/auth/device-cookies.ts); the session
 * the caller had before, if any, ends.
 */

export const signUpInput = z.object({ email: createAccountInput.shape.email, password: passwordInput });
export const signInInput = z.object({ email: z.string().trim().min(1, 'must not be empty').max(254), password: passwordInput });
export const changePasswordInput = z.object({
  /** Required when the account has a password; an account made without one (CLI) sets its first here. */
  current_password: passwordInput.optional(),
  new_password: passwordInput,
});
export const loginTokenInput = z.object({ token: z.string().min(1).max(200) });
export const resetRequestInput = z.object({ email: createAccountInput.shape.email });
export const resetPasswordInput = z.object({ token: z.string().min(1).max(200), new_password: passwordInput });

/** The one answer to a sign-up, whether the e-mail was new or already had an account (which is not told). */
export const signUpAnswerSchema = z
  .object({ object: z.literal('signup'), email: z.string(), mail_sent: z.literal(true).describe('a mail went to the address: its link finishes signing up') })
  .strict();
/** The one answer to a password reset request, whether the e-mail has an account or not. */
export const resetRequestAnswerSchema = z.object({ object: z.literal('password_reset'), email: z.string(), mail_sent: z.literal(true) }).strict();

/** An account as the pages show it. */
export const accountSchema = z
  .object({ id: z.string(), object: z.literal('account'), email: z.string(), paid_account: z.boolean(), created_at: isoTimeSchema })
  .strict();

/** A session just started: its token is shown only this once. */
export const signedInSchema = z
  .object({
    object: z.literal('session'),
    token: z.string().describe('the session secret, for the cookie; shown only this once'),
    expires_at: isoTimeSchema.describe('the latest the session can last (30 days); it ends sooner after 7 idle days'),
    device_token: z.string().describe("the device cookie: this browser signed in to this account (it is not held by locks others' guessing puts on the e-mail)"),
    account: accountSchema,
  })
  .strict();
export type SignedIn = z.infer<typeof signedInSchema>;

/** The one answer for an unknown email, an account without a password and a wrong password. */
export const invalidCredentials = () =>
  new CoreError('unauthorized', 'Wrong email or password.', { reason: 'invalid_credentials' });

/** The session token the caller sent (the pages' cookie), if any: signing in again ends that session. */
/** The caller as the sign-in use cases see it: its old session cookie (ended at sign-in) and its address. */
export const callerOf = (ctx: { credential: Credential; clientIp: string | undefined; device?: string | undefined }): Caller => ({
  previousToken: ctx.credential.kind === 'session' ? ctx.credential.token : null,
  ip: ctx.clientIp,
  device: ctx.device,
});

interface Deps {
  clock: Clock;
  attempts: { perEmail: RateLimiter; perIp: RateLimiter };
  devices: DeviceCookies;
}

interface MailDeps {
  mailer: Mailer;
  logger: Logger;
  config: { links: AccountLinks };
}

/** What confirming an address needs: the welcome credit it grants the first time (STARTER_CREDIT_COINS). */
interface ConfirmDeps {
  config: { starterCreditCoins: Micro };
}

/** What the transport knows of the caller: the cookie it sent (if any), its address and its device cookie. */
export interface Caller {
  previousToken: string | null;
  ip: string | undefined;
  device?: string | undefined;
}

/**
 * Starts a session for the account, ending the caller's previous one (`previousToken`, the
 * cookie it sent, if any): every sign-in gets a fresh token, never an old one kept.
 */
async function signInAs(
  deps: Pick<Deps, 'devices'>,
  em: EntityManager,
  accountId: string,
  now: Date,
  previousToken: string | null,
  /** Writes that must happen with the session's start, in its transaction. */
  before?: (tx: EntityManager) => Promise<void>,
): Promise<SignedIn> {
  const [state] = await em.execute<{ disabled_at: string | null }[]>('select disabled_at from accounts where id = ?', [accountId]);
  if (state?.disabled_at) throw new CoreError('forbidden', 'This account is disabled. Contact the operator of this service.', { reason: 'account_disabled' });
  const session = await em.transactional(async (tx) => {
    await before?.(tx);
    await endSessionByToken(tx, previousToken);
    return startSession(tx, accountId, now);
  });
  const account = await em.findOne(Account, { id: accountId }, { refresh: true });
  if (!account) throw notFound('account_not_found', 'No such account.');
  return {
    object: 'session',
    token: session.token,
    expires_at: session.expiresAt.toISOString(),
    device_token: deps.devices.issue(accountId, now),
    account: accountView(account),
  };
}

/**
 * A new account (empty, unpaid wallet) with its password, not yet confirmed: a mail with a
 * one-time link (24 hours) goes to the address, and the link (`verifyEmail`) confirms it and
 * signs in. When the address already has an account, that account is left alone and its
 * owner gets a mail saying so, with links to sign in and to reset the password. Both answer
 * the same (the caller cannot tell which it was), after the same work. Refused when sign-up is
 * closed, or when the password breaks a rule (for any address alike).
 */
export async function signUp(
  deps: Deps & MailDeps & { config: { signupOpen: boolean } },
  em: EntityManager,
  input: z.output<typeof signUpInput>,
  caller: Caller,
): Promise<z.infer<typeof signUpAnswerSchema>> {
  if (!deps.config.signupOpen) {
    throw new CoreError('forbidden', 'Sign-up is closed on this service. Ask its operator for an account.', { reason: 'signup_closed' });
  }
  // Per address, and per e-mail: sign-up sends mail, which must not become a way to flood someone's inbox.
  await countAttempt(deps, 'signup', { ip: caller.ip, email: input.email });
  checkNewPassword(input.password, { email: input.email });
  const passwordHash = await hashPassword(input.password);
  const now = deps.clock();
  let token: string | null;
  try {
    token = await em.transactional(async (tx) => {
      const account = await createAccount(tx, { email: input.email });
      await tx.execute('update accounts set password_hash = ?, email_verified_at = null where id = ?', [passwordHash, account.id]);
      return (await createAccountToken(tx, account.id, 'verify_email', now)).token;
    });
  } catch (err) {
    if (!(err instanceof CoreError && err.reason === 'email_taken')) throw err;
    token = null;
  }
  sendLater(deps, token ? verificationMail(input.email, deps.config.links.verifyEmail(token)) : accountExistsMail(input.email, deps.config.links));
  return { object: 'signup', email: input.email, mail_sent: true };
}

/**
 * The confirmation link of a sign-up: confirms the address and signs in; a used, expired or
 * unknown link is refused alike. The first confirmation grants the welcome credit (welcome-credit.ts).
 */
export async function verifyEmail(deps: Deps & ConfirmDeps, em: EntityManager, token: string, caller: Caller): Promise<SignedIn> {
  await countAttempt(deps, 'verify', { ip: caller.ip });
  const now = deps.clock();
  const accountId = await peekAccountToken(em, token, 'verify_email', now);
  return signInAs(deps, em, accountId, now, caller.previousToken, async (tx) => {
    await consumeAccountToken(tx, token, 'verify_email', now);
    await confirmEmail(tx, accountId, now, deps.config.starterCreditCoins);
  });
}

/** A new confirmation mail for the signed-in account, while its address is unconfirmed (limited per account and address). */
export async function resendVerification(deps: Deps & MailDeps, em: EntityManager, principal: SessionPrincipal, caller: Caller) {
  const [row] = await em.execute<{ email: string; email_verified_at: Date | null }[]>('select email, email_verified_at from accounts where id = ?', [principal.accountId]);
  if (!row) throw notFound('account_not_found', 'No such account.');
  if (row.email_verified_at) return { object: 'verification' as const, email: row.email, verified: true, mail_sent: false };
  await countAttempt(deps, 'resend_verification', { email: principal.accountId, ip: caller.ip });
  const { token } = await createAccountToken(em, principal.accountId, 'verify_email', deps.clock());
  sendLater(deps, verificationMail(row.email, deps.config.links.verifyEmail(token)));
  return { object: 'verification' as const, email: row.email, verified: false, mail_sent: true };
}

/**
 * "Forgot your password?": when the address has an account (not disabled), a mail with a
 * one-time link valid 30 minutes. The answer is the same either way; the mail is sent after it.
 */
export async function requestPasswordReset(deps: Deps & MailDeps, em: EntityManager, input: z.output<typeof resetRequestInput>, caller: Caller): Promise<z.infer<typeof resetRequestAnswerSchema>> {
  await countAttempt(deps, 'reset_request', { email: input.email, ip: caller.ip });
  const [row] = await em.execute<{ id: string; email: string }[]>(`select id, email from accounts where lower(email) = lower(?) and kind = 'person' and disabled_at is null`, [input.email]);
  if (row) {
    const { token } = await createAccountToken(em, row.id, 'reset_password', deps.clock());
    sendLater(deps, passwordResetMail(row.email, deps.config.links.resetPassword(token)));
  }
  return { object: 'password_reset', email: input.email, mail_sent: true };
}

/** Whether a reset link still works (the page asks for the new password only then); it is not used up. */
export async function checkResetLink(deps: Deps, em: EntityManager, token: string, caller: Caller) {
  await countAttempt(deps, 'reset', { ip: caller.ip });
  await peekAccountToken(em, token, 'reset_password', deps.clock());
  return { object: 'password_reset_link' as const, valid: true as const };
}

/**
 * A reset link and a new password (the rules of any new password): the password is set, the
 * link used up, every session of the account ended, the address counted as confirmed (the mail
 * reached it; the welcome credit if it was not confirmed before), and this caller signed in.
 * A used, expired or unknown link is refused alike.
 */
export async function resetPassword(deps: Deps & ConfirmDeps, em: EntityManager, input: z.output<typeof resetPasswordInput>, caller: Caller): Promise<SignedIn> {
  await countAttempt(deps, 'reset', { ip: caller.ip });
  const now = deps.clock();
  const accountId = await peekAccountToken(em, input.token, 'reset_password', now);
  const [row] = await em.execute<{ email: string }[]>('select email from accounts where id = ?', [accountId]);
  if (!row) throw notFound('account_not_found', 'No such account.');
  checkNewPassword(input.new_password, { email: row.email, param: 'new_password' });
  const passwordHash = await hashPassword(input.new_password);
  return signInAs(deps, em, accountId, now, caller.previousToken, async (tx) => {
    await consumeAccountToken(tx, input.token, 'reset_password', now);
    await tx.execute('update accounts set password_hash = ? where id = ?', [passwordHash, accountId]);
    await confirmEmail(tx, accountId, now, deps.config.starterCreditCoins);
    await endAllSessions(tx, accountId);
  });
}

/**
 * Email and password to a new session. An unknown email, an account without a password and a
 * wrong password get the same answer, after the same work (one argon2 verification). Failures
 * are counted and blocked by the sign-in limits (core/accounts/attempts.ts); a browser whose
 * device cookie names this account is not held by the e-mail's lock.
 */
export async function signIn(deps: Deps & { signInLimits: SignInLimits }, em: EntityManager, input: z.output<typeof signInInput>, caller: Caller): Promise<SignedIn> {
  const [row] = await em.execute<{ id: string; password_hash: string | null }[]>(
    `select id, password_hash from accounts where lower(email) = lower(?) and kind = 'person'`,
    [input.email],
  );
  const now = deps.clock();
  const who = { email: input.email, ip: caller.ip, trustedDevice: row !== undefined && deps.devices.accountOf(caller.device, now) === row.id };
  await checkSignInAllowed(deps.signInLimits, who);
  const ok = await verifyPassword(row?.password_hash, input.password);
  if (!row?.password_hash || !ok) {
    await signInFailed(deps.signInLimits, who);
    throw invalidCredentials();
  }
  await signInSucceeded(deps.signInLimits, who);
  if (needsRehash(row.password_hash)) {
    await em.execute('update accounts set password_hash = ? where id = ? and password_hash = ?', [await hashPassword(input.password), row.id, row.password_hash]);
  }
  return signInAs(deps, em, row.id, now, caller.previousToken);
}

/** An operator's one-time login link to a new session; a used, expired or unknown token is refused alike. */
export async function redeemLoginLink(deps: Deps, em: EntityManager, token: string, caller: Caller): Promise<SignedIn> {
  await countAttempt(deps, 'login_link', { ip: caller.ip });
  const now = deps.clock();
  const accountId = await consumeLoginToken(em, token, now);
  return signInAs(deps, em, accountId, now, caller.previousToken);
}

/** Ends the caller's session. */
export async function signOut(em: EntityManager, principal: SessionPrincipal) {
  await endSession(em, principal.sessionId);
  return { object: 'session' as const, signed_out: true as const };
}

/**
 * A new password for the signed-in account: every session of the account ends (other devices
 * are signed out) and the caller gets a new one.
 */
export async function changePassword(deps: Deps, em: EntityManager, principal: SessionPrincipal, input: z.output<typeof changePasswordInput>): Promise<SignedIn> {
  const [row] = await em.execute<{ email: string; password_hash: string | null }[]>('select email, password_hash from accounts where id = ?', [principal.accountId]);
  if (!row) throw notFound('account_not_found', 'No such account.');
  checkNewPassword(input.new_password, { email: row.email, param: 'new_password' });
  if (row.password_hash !== null) {
    const ok = input.current_password !== undefined && (await verifyPassword(row.password_hash, input.current_password));
    if (!ok) {
      throw new CoreError('invalid_request', 'The current password is wrong.', { param: 'current_password', reason: 'wrong_current_password' });
    }
  }
  const passwordHash = await hashPassword(input.new_password);
  return signInAs(deps, em, principal.accountId, deps.clock(), null, async (tx) => {
    await tx.execute('update accounts set password_hash = ? where id = ?', [passwordHash, principal.accountId]);
    await endAllSessions(tx, principal.accountId);
  });
}
