import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError } from '../errors.ts';

/**
 * Refuses what an account may do only once its e-mail address is confirmed (API keys, apps,
 * payments): an account made on the sign-up page, until its link is followed (docs/accounts.md).
 * Accounts an operator makes count as confirmed.
 */
export async function requireVerifiedEmail(em: EntityManager, accountId: string): Promise<void> {
  const [row] = await em.execute<{ email_verified_at: Date | null }[]>('select email_verified_at from accounts where id = ?', [accountId]);
  if (row && row.email_verified_at === null) {
    throw new CoreError('forbidden', 'Confirm your e-mail address first: open the link we mailed you, or have a new one sent from your account page.', {
      reason: 'email_not_verified',
    });
  }
}
