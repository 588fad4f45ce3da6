import type { EntityManager } from '@mikro-orm/postgresql';
import { accountRef, resolveAccount } from '../accounts/accounts.ts';
import { invalid, notFound } from '../errors.ts';
import { organizationIdSchema } from '../organizations/roles.ts';

/**
 * The wallet an operator credits or corrects (docs/organizations.md, "Operators"): a person's
 * account, named by id or e-mail, or an organization, named by its `org_…` id; exactly one.
 */
export const walletOwnerFields = {
  account: accountRef.optional(),
  organization: organizationIdSchema.optional(),
};

export interface WalletOwner {
  id: string;
  kind: 'person' | 'organization';
}

export async function resolveWalletOwner(em: EntityManager, input: { account?: string | undefined; organization?: string | undefined }): Promise<WalletOwner> {
  if (input.account !== undefined && input.organization !== undefined) {
    throw invalid('organization', 'Name the account or the organization whose wallet this is, not both.', 'account_or_organization');
  }
  if (input.organization !== undefined) {
    const [row] = await em.execute<{ id: string }[]>(`select id from accounts where id = ? and kind = 'organization'`, [input.organization]);
    if (!row) throw notFound('organization_not_found', `No organization ${input.organization}.`, 'organization');
    return { id: row.id, kind: 'organization' };
  }
  if (input.account === undefined) throw invalid('account', 'Name the account (an id or e-mail) or the organization (org_…) whose wallet this is.', 'account_or_organization');
  const account = await resolveAccount(em, input.account);
  return { id: account.id, kind: 'person' };
}
