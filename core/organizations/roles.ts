import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Actor } from '../auth/principals.ts';
import { CoreError, notFound } from '../errors.ts';

/**
 * The roles of a person in an organization (docs/organizations.md):
 * - `owner`: everything, billing and deleting the organization; there is always at least one;
 * - `admin`: members, invitations and every key of the organization;
 * - `member`: their own keys, within the spend limit an admin set for them.
 */
export const ROLES = ['owner', 'admin', 'member'] as const;
export type Role = (typeof ROLES)[number];
const RANK: Record<Role, number> = { member: 1, admin: 2, owner: 3 };

export const roleSchema = z.enum(ROLES);
export const organizationIdSchema = z.string().trim().regex(/^org_[0-9A-Za-z]{1,64}$/, 'must be an organization id such as org_…');
export const personIdSchema = z.string().trim().regex(/^acct_[0-9A-Za-z]{1,64}$/, 'must be a user id such as acct_…');

export const atLeast = (role: Role, need: Role) => RANK[role] >= RANK[need];

/** The person's role in the organization, or null when they are not a member (or it is no organization). */
export async function roleOf(em: EntityManager, organizationId: string, personId: string, opts: { lock?: boolean } = {}): Promise<Role | null> {
  const [row] = await em.execute<{ role: Role }[]>(
    `select m.role from organization_members m join accounts o on o.id = m.organization_id
     where m.organization_id = ? and m.account_id = ? and o.kind = 'organization' and o.disabled_at is null${opts.lock ? ' for update of m' : ''}`,
    [organizationId, personId],
  );
  return row?.role ?? null;
}

/** The refusal for an organization the actor may not see: the same as for one that does not exist. */
export const organizationNotFound = (id: string, param = 'id') => notFound('organization_not_found', `No organization ${id}.`, param);

/**
 * The actor's role in the organization, when it is at least `need`. Outside the actor's reach
 * (not a member, or a management key made for another organization) the organization is unknown
 * (404); a member below the role gets 403, naming the role needed.
 */
export async function requireRole(em: EntityManager, actor: Actor, organizationId: string, need: Role, opts: { lock?: boolean; param?: string } = {}): Promise<Role> {
  if (actor.organizationId !== null && actor.organizationId !== organizationId) throw organizationNotFound(organizationId, opts.param);
  const role = await roleOf(em, organizationId, actor.personId, opts);
  if (!role) throw organizationNotFound(organizationId, opts.param);
  if (!atLeast(role, need)) {
    throw new CoreError('forbidden', `This needs the ${need} role in the organization ${organizationId}; yours is ${role}.`, { reason: `${need}_role_required`, params: { role, needed: need } });
  }
  return role;
}
