import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError } from '../errors.ts';
import { hashSecret, newSecret } from './secrets.ts';

/**
 * One-time sign-in tokens an operator hands a person (`mas account login-link`): for accounts
 * made by the CLI, which have no password yet, or a person who lost theirs. Only the token's
 * hash is stored; it is valid `LOGIN_LINK_SECONDS` and works once.
 */
export const LOGIN_LINK_SECONDS = 15 * 60;
const PREFIX = 'mas_login_';

/** The one refusal for a token that is unknown, used, expired or malformed: which it was is not told. */
export const invalidLoginLink = () =>
  new CoreError('unauthorized', 'This sign-in link is invalid, used or expired. Ask for a new one.', { reason: 'invalid_login_link' });

export async function createLoginToken(em: EntityManager, accountId: string, now: Date): Promise<{ token: string; expiresAt: Date }> {
  const token = newSecret(PREFIX);
  const expiresAt = new Date(now.getTime() + LOGIN_LINK_SECONDS * 1000);
  // Links that ended a day ago are of no use, not even to tell "used" from "unknown": drop them.
  await em.execute('delete from login_links where expires_at < ?', [new Date(now.getTime() - 24 * 3600 * 1000)]);
  await em.execute('insert into login_links (token_hash, account_id, created_at, expires_at) values (?, ?, ?, ?)', [hashSecret(token), accountId, now, expiresAt]);
  return { token, expiresAt };
}

/**
 * Uses the token up, in one statement (two redemptions at once cannot both succeed), and
 * returns its account; anything else is `invalidLoginLink`.
 */
export async function consumeLoginToken(em: EntityManager, token: string, now: Date): Promise<string> {
  if (!token.startsWith(PREFIX) || token.length > 128) throw invalidLoginLink();
  const [row] = await em.execute<{ account_id: string }[]>(
    'update login_links set used_at = ? where token_hash = ? and used_at is null and expires_at > ? returning account_id',
    [now, hashSecret(token), now],
  );
  if (!row) throw invalidLoginLink();
  return row.account_id;
}
