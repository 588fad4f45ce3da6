import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Actor } from '../auth/principals.ts';
import { CoreError, notFound } from '../errors.ts';
import { organizationIdSchema, requireRole } from './roles.ts';
import { ApiKey } from '../keys/api-key.entity.ts';
import { createKey, createKeyInput, getKey, keyIdInput, keyUsage, keyView, revokeKey, updateKey, updateKeyInput, type LimitChecks } from '../keys/keys.ts';

/**
 * The keys a person manages (docs/organizations.md), in the account pages or through a
 * management key (REST /api/v1/keys): one set of rules for both.
 * - Personal keys spend from the person's wallet; only they manage them, and a management key
 *   made for an organization does not reach them.
 * - An organization's keys spend from its wallet and belong each to one member: a member manages
 *   their own, an admin or owner every key of the organization.
 * - Anything else is unknown (404), as a key that does not exist.
 */



/** A new key: in the organization's wallet with `organization_id`, else the personal one; `management` only from the pages. */
export const createManagedKeyInput = createKeyInput.extend({
  organization_id: organizationIdSchema.optional(),
  management: z.boolean().optional(),
});
export const listManagedKeysInput = z.object({ organization_id: organizationIdSchema.optional() }).optional();

/**
 * The wallet a listing or a new key is for: the organization named, or, without one, the
 * personal wallet (a management key made for an organization: that organization).
 */
function walletOf(actor: Actor, named: string | undefined): string | null {
  return named ?? actor.organizationId;
}

export async function createManagedKey(em: EntityManager, actor: Actor, input: z.output<typeof createManagedKeyInput>, checks: LimitChecks) {
  const { organization_id: named, management, ...fields } = input;
  if (management && actor.keyId) {
    throw new CoreError('forbidden', 'A management key cannot make management keys: make them on the API keys page or with `mas key create --management`.', { reason: 'management_key_not_allowed', param: 'management' });
  }
  const org = walletOf(actor, named);
  if (org === null) return createKey(em, actor.personId, fields, checks, { management: management ?? false });
  await requireRole(em, actor, org, 'member', { param: 'organization_id' });
  return createKey(em, org, fields, checks, { memberId: actor.personId, management: management ?? false });
}

/** The personal keys, or an organization's: every key of it for an admin, their own for a member. */
export async function listManagedKeys(em: EntityManager, actor: Actor, input: z.output<typeof listManagedKeysInput>) {
  const org = walletOf(actor, input?.organization_id);
  const where =
    org === null
      ? { accountId: actor.personId, memberId: null }
      : (await requireRole(em, actor, org, 'member', { param: 'organization_id' })) === 'member'
        ? { accountId: org, memberId: actor.personId }
        : { accountId: org };
  const keys = await em.find(ApiKey, { ...where, kind: { $in: ['standard', 'management'] } }, { orderBy: { createdAt: 'asc', id: 'asc' } });
  const usage = await keyUsage(em, keys.map((k) => k.id));
  return { object: 'list' as const, data: keys.map((k) => keyView(k, usage.get(k.id))) };
}

/** The wallet (account id) of a key the actor may manage, or not_found. */
async function managedWallet(em: EntityManager, actor: Actor, keyId: string): Promise<string> {
  const key = await em.findOne(ApiKey, { id: keyId, kind: { $in: ['standard', 'management'] } });
  const unknown = notFound('key_not_found', `No API key ${keyId}.`, 'id');
  if (!key) throw unknown;
  if (key.memberId === null) {
    if (key.accountId !== actor.personId || actor.organizationId !== null) throw unknown;
    return key.accountId;
  }
  const role = await requireRole(em, actor, key.accountId, 'member').catch(() => {
    throw unknown;
  });
  if (role === 'member' && key.memberId !== actor.personId) throw unknown;
  return key.accountId;
}

export async function getManagedKey(em: EntityManager, actor: Actor, input: z.output<typeof keyIdInput>) {
  return getKey(em, await managedWallet(em, actor, input.id), input.id);
}

export async function updateManagedKey(em: EntityManager, actor: Actor, input: z.output<typeof updateKeyInput>, checks: LimitChecks) {
  return updateKey(em, await managedWallet(em, actor, input.id), input, checks);
}

/** Revokes the key: refused on every instance from the next request on (a management key may revoke itself). */
export async function revokeManagedKey(em: EntityManager, actor: Actor, input: z.output<typeof keyIdInput>) {
  return revokeKey(em, input.id, await managedWallet(em, actor, input.id));
}
