import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError } from '../errors.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';

/**
 * The one-time links of the mails the service sends a person: confirming the e-mail address of
 * a new account (24 hours) and resetting a password (30 minutes). As login links, only the
 * token's SHA-256 is stored, and a token works once: it is used up in the statement that checks
 * it, so two redemptions at once cannot both succeed.
 */
export type AccountTokenPurpose = 'verify_email' | 'reset_password';

export const TOKEN_SECONDS: Record<AccountTokenPurpose, number> = {
  verify_email: 24 * 3600,
  reset_password: 30 * 60,
};
const PREFIX: Record<AccountTokenPurpose, string> = { verify_email: 'mas_verify_', reset_password: 'mas_reset_' };

/** The one refusal for a link that is unknown, used, expired or malformed: which it was is not told. */
export const invalidAccountLink = (purpose: AccountTokenPurpose) =>
  purpose === 'verify_email'
    ? new CoreError('invalid_request', 'This confirmation link is invalid, used or expired. Sign in to have a new one sent.', { param: 'token', reason: 'invalid_verification_link' })
    : new CoreError('invalid_request', 'This password reset link is invalid, used or expired. Ask for a new one.', { param: 'token', reason: 'invalid_reset_link' });

const wellFormed = (purpose: AccountTokenPurpose, token: string) => token.startsWith(PREFIX[purpose]) && token.length <= 128;

export async function createAccountToken(em: EntityManager, accountId: string, purpose: AccountTokenPurpose, now: Date): Promise<{ token: string; expiresAt: Date }> {
  const token = newSecret(PREFIX[purpose]);
  const expiresAt = new Date(now.getTime() + TOKEN_SECONDS[purpose] * 1000);
  // Links that ended a day ago are of no use: drop them.
  await em.execute('delete from account_tokens where expires_at < ?', [new Date(now.getTime() - 24 * 3600 * 1000)]);
  await em.execute('insert into account_tokens (token_hash, account_id, purpose, created_at, expires_at) values (?, ?, ?, ?, ?)', [
    hashSecret(token),
    accountId,
    purpose,
    now,
    expiresAt,
  ]);
  return { token, expiresAt };
}

/** The account of a live token, without using it up (a page that asks for a new password first checks its link). */
export async function peekAccountToken(em: EntityManager, token: string, purpose: AccountTokenPurpose, now: Date): Promise<string> {
  if (!wellFormed(purpose, token)) throw invalidAccountLink(purpose);
  const [row] = await em.execute<{ account_id: string }[]>(
    'select account_id from account_tokens where token_hash = ? and purpose = ? and used_at is null and expires_at > ?',
    [hashSecret(token), purpose, now],
  );
  if (!row) throw invalidAccountLink(purpose);
  return row.account_id;
}

/** Uses the token up, in one statement, and returns its account; anything else is `invalidAccountLink`. */
export async function consumeAccountToken(em: EntityManager, token: string, purpose: AccountTokenPurpose, now: Date): Promise<string> {
  if (!wellFormed(purpose, token)) throw invalidAccountLink(purpose);
  const [row] = await em.execute<{ account_id: string }[]>(
    'update account_tokens set used_at = ? where token_hash = ? and purpose = ? and used_at is null and expires_at > ? returning account_id',
    [now, hashSecret(token), purpose, now],
  );
  if (!row) throw invalidAccountLink(purpose);
  return row.account_id;
}
