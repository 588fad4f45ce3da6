import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { notFound } from '../errors.ts';
import { organizationIdSchema, roleOf } from '../organizations/roles.ts';
import { resolveAccount } from '../accounts/accounts.ts';
import { createKey, listKeys, type createKeyInput, type LimitChecks } from '../keys/keys.ts';

/**
 * Operators name accounts by id or email (`accountRef`); these use cases resolve the name,
 * then act as the account's own use cases do.
 */

/** What an operator may add to a key's fields: the organization whose wallet it spends from (the person must be a member), and whether it is a management key. */
export const operatorKeyOptions = z.object({
  organization: organizationIdSchema.optional(),
  management: z.boolean().optional(),
});

/** `key create`: a key for the named person, in their wallet or, with `organization`, in that organization's (as theirs). */
export async function createKeyFor(em: EntityManager, ref: string, input: z.output<typeof createKeyInput> & z.output<typeof operatorKeyOptions>, checks: LimitChecks) {
  const { organization, management, ...fields } = input;
  const account = await resolveAccount(em, ref);
  if (organization === undefined) return { account: account.id, ...(await createKey(em, account.id, fields, checks, { management: management ?? false })) };
  if (!(await roleOf(em, organization, account.id))) {
    throw notFound('member_not_found', `${account.email} is not a member of the organization ${organization}.`, 'organization');
  }
  return { account: organization, ...(await createKey(em, organization, fields, checks, { memberId: account.id, management: management ?? false })) };
}

/** `key list`: every key of the named account, revoked ones included. */
export async function listKeysOf(em: EntityManager, ref: string) {
  return listKeys(em, (await resolveAccount(em, ref)).id);
}
