import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { invitationView, type InvitationRow } from '../../organizations/invitations.ts';
import { membersOfOrganizations } from '../../organizations/members.ts';
import { notFound } from '../../errors.ts';
import { coinsToJson } from '../../money/coins.ts';
import { balanceView, getBalance } from '../../money/wallet.ts';
import { accountId } from './accounts.ts';
import { checkCursor, Conditions, idsInput, iso, MAX_PAGE, pageInput, pageOf, prefixedId, textArray, timeRangeInput } from './paging.ts';

/**
 * Operators' reads of organizations (docs/organizations.md, "Operators"): organizations are rows
 * of `accounts` of kind `organization`, so their wallet, ledger and keys are read as an account's
 * (wallets.ts, ledger.ts, keys.ts take their `org_…` id); here are the organizations themselves,
 * their members with what they spent, the organizations a person belongs to, and invitations
 * (never their token: only its hash is stored, and it is not read).
 */
export const organizationId = prefixedId('org');
const invitationId = prefixedId('inv');

export const organizationListInput = pageInput.merge(timeRangeInput).extend({
  /** Any part of the name, any case. */
  name_contains: z.string().trim().min(1).max(100).optional(),
  /** Only the organizations this person (`acct_…`) belongs to. */
  member: accountId.optional(),
  disabled: z.boolean().optional(),
  after: organizationId.optional(),
});

export const organizationIdsInput = idsInput(organizationId);
export const personIdsInput = idsInput(accountId);

export const INVITATION_STATUSES = ['pending', 'accepted', 'revoked', 'expired'] as const;
export const invitationListInput = pageInput.merge(timeRangeInput).extend({
  organization: organizationId,
  status: z.enum(INVITATION_STATUSES).optional(),
  after: invitationId.optional(),
});

interface Row {
  id: string;
  name: string;
  email: string;
  paid: boolean;
  created_at: Date | string;
  disabled_at: Date | string | null;
  members: string;
}

const SELECT = `select o.id, o.name, o.email, o.paid, o.created_at, o.disabled_at,
    (select count(*) from organization_members m where m.organization_id = o.id)::text as members
  from accounts o`;

const view = (r: Row) => ({
  id: r.id,
  object: 'organization' as const,
  name: r.name,
  /** Where the organization's billing mail goes: the address of the owner who made it. */
  billing_email: r.email,
  paid_account: r.paid,
  member_count: Number(r.members),
  created_at: iso(r.created_at)!,
  disabled_at: iso(r.disabled_at),
});
export type AdminOrganizationView = ReturnType<typeof view>;

const likeText = (s: string) => s.toLowerCase().replace(/[\\%_]/g, '\\$&');

/** Organizations, newest first, filtered. */
export async function listAdminOrganizations(em: EntityManager, input: z.output<typeof organizationListInput>) {
  const where = new Conditions().add(`o.kind = 'organization'`).range('o.created_at', input).after('o', 'accounts', input.after);
  if (input.name_contains) where.add(`lower(o.name) like ? escape '\\'`, `%${likeText(input.name_contains)}%`);
  if (input.member) where.add('exists (select 1 from organization_members m where m.organization_id = o.id and m.account_id = ?)', input.member);
  if (input.disabled !== undefined) where.add(input.disabled ? 'o.disabled_at is not null' : 'o.disabled_at is null');
  const rows = await em.execute<Row[]>(`${SELECT} ${where.sql()} order by o.created_at desc, o.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'accounts', input.after, rows);
  return pageOf(rows.map(view), input.first);
}

/** The organizations with these ids, in one query (a dataloader's batch); unknown ids are left out. */
export async function organizationsByIds(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<Row[]>(`${SELECT} where o.kind = 'organization' and o.id = any(?::text[])`, [textArray(ids)]);
  return { object: 'list' as const, data: rows.map(view) };
}

/** The members of these organizations, oldest first, each with what they spent (one query). */
export async function membersByOrganizationIds(em: EntityManager, ids: string[]) {
  return { object: 'list' as const, data: await membersOfOrganizations(em, ids) };
}

/** The organizations these people belong to, with their role and spend limit there (one query). */
export async function membershipsByPersonIds(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<{ account_id: string; organization_id: string; role: 'owner' | 'admin' | 'member'; spend_limit_micro: string | null; spend_limit_period: 'total' | 'monthly' | null; created_at: Date | string }[]>(
    `select m.account_id, m.organization_id, m.role, m.spend_limit_micro::text as spend_limit_micro, m.spend_limit_period, m.created_at
     from organization_members m join accounts o on o.id = m.organization_id
     where m.account_id = any(?::text[]) and o.kind = 'organization' order by lower(o.name), o.id`,
    [textArray(ids)],
  );
  return {
    object: 'list' as const,
    data: rows.map((r) => ({
      object: 'organization_membership' as const,
      user_id: r.account_id,
      organization: r.organization_id,
      role: r.role,
      spend_limit_coins: r.spend_limit_micro === null ? null : coinsToJson(BigInt(r.spend_limit_micro)),
      spend_limit_period: r.spend_limit_micro === null ? null : r.spend_limit_period,
      joined_at: iso(r.created_at)!,
    })),
  };
}

/** Named columns only: the token's hash never leaves the table. */
const INVITATION_SELECT = 'select i.id, i.organization_id, i.email, i.role, i.created_at, i.expires_at, i.accepted_at, i.revoked_at from organization_invitations i';

/** An organization's invitations, newest first, every status (the time `now` tells the expired ones). */
export async function listAdminInvitations(em: EntityManager, input: z.output<typeof invitationListInput>, now: Date) {
  const where = new Conditions().add('i.organization_id = ?', input.organization).range('i.created_at', input).after('i', 'organization_invitations', input.after);
  if (input.status === 'accepted') where.add('i.accepted_at is not null');
  if (input.status === 'revoked') where.add('i.revoked_at is not null');
  if (input.status === 'pending') where.add('i.accepted_at is null and i.revoked_at is null and i.expires_at > ?::timestamptz', now.toISOString());
  if (input.status === 'expired') where.add('i.accepted_at is null and i.revoked_at is null and i.expires_at <= ?::timestamptz', now.toISOString());
  const rows = await em.execute<InvitationRow[]>(`${INVITATION_SELECT} ${where.sql()} order by i.created_at desc, i.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'organization_invitations', input.after, rows);
  return pageOf(rows.map((r) => invitationView(r, now)), input.first);
}

export const organizationDetailInput = z.object({ id: organizationId });

/** One organization with its balance, members and pending invitations (`mas org show`); 404 naming `id` when there is none. */
export async function adminOrganizationDetail(em: EntityManager, id: string, now: Date) {
  const [organization] = (await organizationsByIds(em, [id])).data;
  if (!organization) throw notFound('organization_not_found', `No organization ${id}.`, 'id');
  const balance = balanceView(await getBalance(em, id));
  const members = (await membersOfOrganizations(em, [id])).map(({ organization_id: _, ...m }) => m);
  const invitations = (await listAdminInvitations(em, { organization: id, status: 'pending', first: MAX_PAGE }, now)).data;
  return { ...organization, balance, members, invitations };
}
