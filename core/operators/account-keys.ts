import type { EntityManager } from '@mikro-orm/postgresql';
import type { z } from 'zod';
import { resolveAccount } from '../accounts/accounts.ts';
import { createKey, listKeys, type createKeyInput, type LimitChecks } from '../keys/keys.ts';

/**
 * Operators name accounts by id or email (`accountRef`); these use cases resolve the name,
 * then act as the account's own use cases do.
 */

/** `key create`: a key for the named account. */
export async function createKeyFor(em: EntityManager, ref: string, input: z.output<typeof createKeyInput>, checks: LimitChecks) {
  const account = await resolveAccount(em, ref);
  return { account: account.id, ...(await createKey(em, account.id, input, checks)) };
}

/** `key list`: every key of the named account, revoked ones included. */
export async function listKeysOf(em: EntityManager, ref: string) {
  return listKeys(em, (await resolveAccount(em, ref)).id);
}
