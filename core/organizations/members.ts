import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Actor } from '../auth/principals.ts';
import { CoreError, invalid, notFound } from '../errors.ts';
import { coinsToJson } from '../money/coins.ts';
import { parseKeyLimits } from '../keys/limits.ts';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { atLeast, organizationIdSchema, personIdSchema, requireRole, roleOf, roleSchema, type Role } from './roles.ts';

/**
 * The members of an organization (docs/organizations.md): their role and the spend limit an admin
 * set for them, over all their keys of the organization, enforced in the reservation itself
 * (mas_member_spend_room in core/money/money.sql), on top of each key's own limit.
 */

export const memberRef = z.object({
  id: organizationIdSchema,
  user_id: personIdSchema,
});

/** A change of a member: a field left out keeps its value; `spend_limit_coins: null` removes the limit. */
export const updateMemberInput = memberRef.extend({
  role: roleSchema.optional(),
  spend_limit_coins: z.union([z.string().trim().max(30), z.number(), z.null()]).optional(),
  spend_limit_period: z.enum(['total', 'monthly']).optional(),
});

export const memberSchema = z
  .object({
    object: z.literal('organization_member'),
    user_id: z.string().describe('the person’s account id'),
    email: z.string(),
    role: roleSchema,
    spend_limit_coins: coinsSchema.nullable().describe('the most the member may spend from the organization’s wallet in the period; null: no limit'),
    spend_limit_period: z.enum(['total', 'monthly']).nullable().describe('total: everything the member spent through their keys of the organization; monthly: per calendar month, UTC'),
    spent_coins: coinsSchema.describe('spent in the current period (this calendar month, UTC, without a limit), with what open requests hold'),
    joined_at: isoTimeSchema,
  })
  .strict();
export type MemberView = z.infer<typeof memberSchema>;

type Row = { organization_id: string; account_id: string; email: string; role: Role; spend_limit_micro: string | null; spend_limit_period: 'total' | 'monthly' | null; created_at: Date; spent: string };

/**
 * Members with what they spent: captured in the limit's period (a calendar month without a
 * limit) plus what their open requests hold, through their keys of the organization: the same
 * sums mas_member_spend_room makes.
 */
const SELECT = `select m.organization_id, m.account_id, p.email, m.role, m.spend_limit_micro::text as spend_limit_micro, m.spend_limit_period, m.created_at,
    (coalesce((select sum(h.captured_micro) from api_keys k join holds h on h.metadata \\? 'key_id' and h.metadata->>'key_id' = k.id
               where k.account_id = m.organization_id and k.member_id = m.account_id and h.status = 'settled'
                 and h.ended_at >= mas_key_period_start(coalesce(m.spend_limit_period, 'monthly'))), 0)
     + coalesce((select sum(h.amount_micro) from api_keys k join holds h on h.metadata \\? 'key_id' and h.metadata->>'key_id' = k.id
               where k.account_id = m.organization_id and k.member_id = m.account_id and h.status = 'open' and h.ended_at is null), 0))::text as spent
  from organization_members m join accounts p on p.id = m.account_id`;

function view(r: Row): MemberView {
  return {
    object: 'organization_member' as const,
    user_id: r.account_id,
    email: r.email,
    role: r.role,
    spend_limit_coins: r.spend_limit_micro === null ? null : coinsToJson(BigInt(r.spend_limit_micro)),
    spend_limit_period: r.spend_limit_micro === null ? null : r.spend_limit_period,
    spent_coins: coinsToJson(BigInt(r.spent)),
    joined_at: new Date(r.created_at).toISOString(),
  };
}

/** The members (admins and owners: a member sees themself in the organization's own view). */
export async function listMembers(em: EntityManager, actor: Actor, organizationId: string) {
  await requireRole(em, actor, organizationId, 'admin');
  const rows = await em.execute<Row[]>(`${SELECT} where m.organization_id = ? order by m.created_at, m.account_id`, [organizationId]);
  return { object: 'list' as const, data: rows.map(view) };
}

export async function readMember(em: EntityManager, organizationId: string, personId: string): Promise<MemberView> {
  const [row] = await em.execute<Row[]>(`${SELECT} where m.organization_id = ? and m.account_id = ?`, [organizationId, personId]);
  if (!row) throw notFound('member_not_found', `No member ${personId} in the organization ${organizationId}.`, 'user_id');
  return view(row);
}

/** Owners of the organization, its rows locked: the last one may not go. */
async function lockedOwners(tx: EntityManager, organizationId: string): Promise<string[]> {
  const rows = await tx.execute<{ account_id: string }[]>(
    `select account_id from organization_members where organization_id = ? and role = 'owner' order by account_id for update`,
    [organizationId],
  );
  return rows.map((r) => r.account_id);
}

/**
 * Changes a member's role or spend limit (admins; only an owner makes or unmakes an owner, or
 * changes one). The last owner keeps the role. Lowering a limit below what was spent is allowed:
 * the member's requests are refused from then on.
 */
export async function updateMember(em: EntityManager, actor: Actor, input: z.output<typeof updateMemberInput>, now: Date): Promise<MemberView> {
  const { id: organizationId, user_id: personId } = input;
  return em.transactional(async (tx) => {
    const mine = await requireRole(tx, actor, organizationId, 'admin', { lock: true });
    const owners = await lockedOwners(tx, organizationId);
    const theirs = await roleOf(tx, organizationId, personId, { lock: true });
    if (!theirs) throw notFound('member_not_found', `No member ${personId} in the organization ${organizationId}.`, 'user_id');
    if ((theirs === 'owner' || input.role === 'owner') && !atLeast(mine, 'owner')) {
      throw new CoreError('forbidden', 'Only an owner makes, changes or unmakes an owner.', { reason: 'owner_role_required', param: 'role' });
    }
    if (theirs === 'owner' && input.role !== undefined && input.role !== 'owner' && owners.length === 1) {
      throw new CoreError('conflict', 'An organization always has an owner: make another member owner first.', { reason: 'last_owner', param: 'role' });
    }
    const current = await tx.execute<{ spend_limit_period: 'total' | 'monthly' | null }[]>(
      'select spend_limit_period from organization_members where organization_id = ? and account_id = ?',
      [organizationId, personId],
    );
    const limits = await parseKeyLimits(
      { spend_limit_coins: input.spend_limit_coins, spend_limit_period: input.spend_limit_period },
      { now, knownModel: () => Promise.reject(new Error('members have no allowed models')), currentPeriod: current[0]?.spend_limit_period ?? null },
    ).catch((err: unknown) => {
      // The limit rules are a key's; the message names the member's field, which has the same name.
      if (err instanceof CoreError && err.param === 'spend_limit_period' && input.spend_limit_period !== undefined) throw invalid('spend_limit_period', err.message);
      throw err;
    });
    const sets: string[] = [];
    const values: unknown[] = [];
    const set = (column: string, value: unknown) => {
      sets.push(`${column} = ?`);
      values.push(value);
    };
    if (input.role !== undefined) set('role', input.role);
    if (limits.spendLimitMicro !== undefined) set('spend_limit_micro', limits.spendLimitMicro === null ? null : limits.spendLimitMicro.toString());
    if (limits.spendLimitPeriod !== undefined) set('spend_limit_period', limits.spendLimitPeriod);
    if (sets.length > 0) {
      await tx.execute(`update organization_members set ${sets.join(', ')} where organization_id = ? and account_id = ?`, [...values, organizationId, personId]);
    }
    return readMember(tx, organizationId, personId);
  });
}

/**
 * Removes a member (admins; an owner only by an owner; anyone may leave), at once: their keys of
 * the organization are revoked (401 on their next request, on every instance, as any revocation)
 * and their apps' connections to its wallet end. The last owner cannot go.
 */
export async function removeMember(em: EntityManager, actor: Actor, input: z.output<typeof memberRef>) {
  const { id: organizationId, user_id: personId } = input;
  return em.transactional(async (tx) => {
    const leaving = personId === actor.personId;
    const mine = await requireRole(tx, actor, organizationId, leaving ? 'member' : 'admin', { lock: true });
    const owners = await lockedOwners(tx, organizationId);
    const theirs = await roleOf(tx, organizationId, personId, { lock: true });
    if (!theirs) throw notFound('member_not_found', `No member ${personId} in the organization ${organizationId}.`, 'user_id');
    if (theirs === 'owner' && !leaving && !atLeast(mine, 'owner')) {
      throw new CoreError('forbidden', 'Only an owner removes an owner.', { reason: 'owner_role_required', param: 'user_id' });
    }
    if (theirs === 'owner' && owners.length === 1) {
      throw new CoreError('conflict', 'An organization always has an owner: make another member owner first.', { reason: 'last_owner', param: 'user_id' });
    }
    const member = await readMember(tx, organizationId, personId);
    const keys = await tx.execute<{ id: string }[]>(
      'update api_keys set revoked_at = now() where account_id = ? and member_id = ? and revoked_at is null returning id',
      [organizationId, personId],
    );
    const apps = await tx.execute<{ id: string }[]>(
      'update app_connections set revoked_at = now() where account_id = ? and member_id = ? and revoked_at is null returning id',
      [organizationId, personId],
    );
    await tx.execute('delete from organization_members where organization_id = ? and account_id = ?', [organizationId, personId]);
    return { ...member, object: 'organization_member' as const, deleted: true as const, keys_revoked: keys.length, apps_disconnected: apps.length };
  });
}

/**
 * Every member of these organizations with what they spent (the same sums as `listMembers`),
 * without a role check: for operators' reads (core/admin/reads/organizations.ts), one query.
 */
export async function membersOfOrganizations(em: EntityManager, organizationIds: readonly string[]) {
  if (organizationIds.length === 0) return [];
  const rows = await em.execute<Row[]>(
    `${SELECT} where m.organization_id = any(?::text[]) order by m.created_at, m.account_id`,
    [`{${organizationIds.map((id) => `"${id.replace(/["\\]/g, '\\$&')}"`).join(',')}}`],
  );
  return rows.map((r) => ({ organization_id: r.organization_id, ...view(r) }));
}
