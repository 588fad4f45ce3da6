import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { consumeLoginToken } from '../auth/login-links.ts';
import type { Credential, SessionPrincipal } from '../auth/principals.ts';
import { endAllSessions, endSession, endSessionByToken, startSession } from '../auth/sessions.ts';
import { CoreError, notFound } from '../errors.ts';
import type { Clock, RateLimiter } from '../ports.ts';
import { countAttempt } from './attempts.ts';
import { isoTimeSchema } from '../views.ts';
import { Account } from './account.entity.ts';
import { accountView, createAccount, createAccountInput } from './accounts.ts';
import { checkNewPassword, hashPassword, needsRehash, passwordInput, verifyPassword } from './passwords.ts';

/**
 * The account pages' ways in and out: sign-up, sign-in (a password or an operator's login
 * link), sign-out and a password change. Each way in starts a new session and answers its
 * token once (the pages put it in the cookie); the session the caller had before, if any, ends.
 */

export const signUpInput = z.object({ email: createAccountInput.shape.email, password: passwordInput });
export const signInInput = z.object({ email: z.string().trim().min(1, 'must not be empty').max(254), password: passwordInput });
export const changePasswordInput = z.object({
  /** Required when the account has a password; an account made without one (CLI) sets its first here. */
  current_password: passwordInput.optional(),
  new_password: passwordInput,
});
export const loginTokenInput = z.object({ token: z.string().min(1).max(200) });

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
    account: accountSchema,
  })
  .strict();
export type SignedIn = z.infer<typeof signedInSchema>;

/** The one answer for an unknown email, an account without a password and a wrong password. */
export const invalidCredentials = () =>
  new CoreError('unauthorized', 'Wrong email or password.', { reason: 'invalid_credentials' });

/** The session token the caller sent (the pages' cookie), if any: signing in again ends that session. */
/** The caller as the sign-in use cases see it: its old session cookie (ended at sign-in) and its address. */
export const callerOf = (ctx: { credential: Credential; clientIp: string | undefined }): Caller => ({
  previousToken: ctx.credential.kind === 'session' ? ctx.credential.token : null,
  ip: ctx.clientIp,
});

interface Deps {
  clock: Clock;
  attempts: { perEmail: RateLimiter; perIp: RateLimiter };
}

/** What the transport knows of the caller: the cookie it sent (if any) and its address. */
export interface Caller {
  previousToken: string | null;
  ip: string | undefined;
}

/**
 * Starts a session for the account, ending the caller's previous one (`previousToken`, the
 * cookie it sent, if any): every sign-in gets a fresh token, never an old one kept.
 */
async function signInAs(
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
  return { object: 'session', token: session.token, expires_at: session.expiresAt.toISOString(), account: accountView(account) };
}

/** A new account (empty, unpaid wallet) with its password, signed in; refused when sign-up is closed. */
export async function signUp(
  deps: Deps & { config: { signupOpen: boolean } },
  em: EntityManager,
  input: z.output<typeof signUpInput>,
  caller: Caller,
): Promise<SignedIn> {
  if (!deps.config.signupOpen) {
    throw new CoreError('forbidden', 'Sign-up is closed on this service. Ask its operator for an account.', { reason: 'signup_closed' });
  }
  await countAttempt(deps, 'signup', { ip: caller.ip });
  checkNewPassword(input.password, { email: input.email });
  const passwordHash = await hashPassword(input.password);
  const accountId = await em.transactional(async (tx) => {
    const account = await createAccount(tx, { email: input.email });
    await tx.execute('update accounts set password_hash = ? where id = ?', [passwordHash, account.id]);
    return account.id;
  });
  return signInAs(em, accountId, deps.clock(), caller.previousToken);
}

/**
 * Email and password to a new session. An unknown email, an account without a password and a
 * wrong password get the same answer, after the same work (one argon2 verification).
 */
export async function signIn(deps: Deps, em: EntityManager, input: z.output<typeof signInInput>, caller: Caller): Promise<SignedIn> {
  await countAttempt(deps, 'signin', { email: input.email, ip: caller.ip });
  const [row] = await em.execute<{ id: string; password_hash: string | null }[]>(
    'select id, password_hash from accounts where lower(email) = lower(?)',
    [input.email],
  );
  const ok = await verifyPassword(row?.password_hash, input.password);
  if (!row?.password_hash || !ok) throw invalidCredentials();
  if (needsRehash(row.password_hash)) {
    await em.execute('update accounts set password_hash = ? where id = ? and password_hash = ?', [await hashPassword(input.password), row.id, row.password_hash]);
  }
  return signInAs(em, row.id, deps.clock(), caller.previousToken);
}

/** An operator's one-time login link to a new session; a used, expired or unknown token is refused alike. */
export async function redeemLoginLink(deps: Deps, em: EntityManager, token: string, caller: Caller): Promise<SignedIn> {
  await countAttempt(deps, 'login_link', { ip: caller.ip });
  const now = deps.clock();
  const accountId = await consumeLoginToken(em, token, now);
  return signInAs(em, accountId, now, caller.previousToken);
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
  return signInAs(em, principal.accountId, deps.clock(), null, async (tx) => {
    await tx.execute('update accounts set password_hash = ? where id = ?', [passwordHash, principal.accountId]);
    await endAllSessions(tx, principal.accountId);
  });
}
