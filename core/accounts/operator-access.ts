import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { createLoginToken } from '../auth/login-links.ts';
import { endAllSessions } from '../auth/sessions.ts';
import type { Clock } from '../ports.ts';
import { accountRef, accountView, resolveAccount } from './accounts.ts';
import { checkNewPassword, hashPassword, passwordInput } from './passwords.ts';

/**
 * An operator's ways to let a person into the account pages, naming the account by id or
 * email: set its password, or hand out a one-time login link.
 */

export const setPasswordInput = z.object({ account: accountRef, password: passwordInput });

/** Sets the account's password (the same rules as sign-up) and ends all its sessions. */
export async function setPasswordFor(em: EntityManager, input: z.output<typeof setPasswordInput>) {
  const account = await resolveAccount(em, input.account);
  checkNewPassword(input.password, { email: account.email });
  const passwordHash = await hashPassword(input.password);
  const ended = await em.transactional(async (tx) => {
    await tx.execute('update accounts set password_hash = ? where id = ?', [passwordHash, account.id]);
    return endAllSessions(tx, account.id);
  });
  return { ...accountView(account), password_set: true as const, sessions_ended: ended };
}

/**
 * A one-time sign-in token for the account, valid 15 minutes. The adapter turns it into a link
 * (the pages' `/login/link?token=…`); it is a credential: give it only to the account's person.
 */
export async function loginLinkFor(deps: { clock: Clock }, em: EntityManager, ref: string) {
  const account = await resolveAccount(em, ref);
  const { token, expiresAt } = await createLoginToken(em, account.id, deps.clock());
  return { object: 'login_link' as const, account: account.id, email: account.email, token, expires_at: expiresAt.toISOString() };
}
