import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Actor } from '../auth/principals.ts';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { coinsToJson } from '../money/coins.ts';
import { balanceSchema, balanceView, getBalance } from '../money/wallet.ts';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { organizationIdSchema, organizationNotFound, requireRole, roleSchema, type Role } from './roles.ts';

/**
 * Organizations (docs/organizations.md): a team's shared wallet. An organization is an account
 * of kind `organization` (its wallet, ledger, payments and subscription are an account's, under
 * the same money functions), with members in organization_members.
 */

/** A person makes at most this many organizations (they may be invited to more). */
export const MAX_OWNED_ORGANIZATIONS = 10;

export const createOrganizationInput = z.object({ name: z.string().trim().min(1).max(100) });
export const organizationIdInput = z.object({ id: organizationIdSchema });

export const organizationSchema = z
  .object({
    id: z.string(),
    object: z.literal('organization'),
    name: z.string(),
    created_at: isoTimeSchema,
    role: roleSchema.describe('the caller’s role in the organization'),
    spend_limit_coins: coinsSchema.nullable().describe('the caller’s spend limit in the organization; null: none'),
    spend_limit_period: z.enum(['total', 'monthly']).nullable(),
    balance: balanceSchema.optional().describe('the organization’s wallet (GET of one organization)'),
  })
  .strict();
export type OrganizationView = z.infer<typeof organizationSchema>;

type Row = { id: string; name: string; created_at: Date; role: Role; spend_limit_micro: string | null; spend_limit_period: 'total' | 'monthly' | null };

const SELECT = `select o.id, o.name, o.created_at, m.role, m.spend_limit_micro::text as spend_limit_micro, m.spend_limit_period
  from organization_members m join accounts o on o.id = m.organization_id
  where o.kind = 'organization' and o.disabled_at is null`;

function view(r: Row): OrganizationView {
  return {
    id: r.id,
    object: 'organization' as const,
    name: r.name,
    created_at: new Date(r.created_at).toISOString(),
    role: r.role,
    spend_limit_coins: r.spend_limit_micro === null ? null : coinsToJson(BigInt(r.spend_limit_micro)),
    spend_limit_period: r.spend_limit_micro === null ? null : r.spend_limit_period,
  };
}

/**
 * Makes an organization with an empty wallet; its maker is its first owner, and its billing mail
 * goes to the maker's address. A management key made for one organization cannot make another.
 */
export async function createOrganization(em: EntityManager, actor: Actor, input: z.output<typeof createOrganizationInput>): Promise<OrganizationView> {
  if (actor.organizationId !== null) {
    throw new CoreError('forbidden', 'This management key acts on one organization only; a personal management key or the account pages make organizations.', { reason: 'organization_scoped_key' });
  }
  return em.transactional(async (tx) => {
    const [person] = await tx.execute<{ email: string }[]>(`select email from accounts where id = ? and kind = 'person' for update`, [actor.personId]);
    if (!person) throw notFound('account_not_found', `No account ${actor.personId}.`);
    const [owned] = await tx.execute<{ n: string }[]>(`select count(*)::text as n from organization_members where account_id = ? and role = 'owner'`, [actor.personId]);
    if (Number(owned!.n) >= MAX_OWNED_ORGANIZATIONS) {
      throw new CoreError('limit_reached', `You own ${MAX_OWNED_ORGANIZATIONS} organizations already, the most allowed.`, { reason: 'organization_limit_reached' });
    }
    const id = newId('org');
    await tx.execute(`insert into accounts (id, email, kind, name, paid) values (?, ?, 'organization', ?, false)`, [id, person.email, input.name]);
    await tx.execute('insert into wallets (account_id) values (?)', [id]);
    await tx.execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, 'owner')`, [id, actor.personId]);
    const [row] = await tx.execute<Row[]>(`${SELECT} and m.organization_id = ? and m.account_id = ?`, [id, actor.personId]);
    return view(row!);
  });
}

/** The organizations the actor belongs to (a management key made for one: that one), by name. */
export async function listOrganizations(em: EntityManager, actor: Actor) {
  const rows = await em.execute<Row[]>(
    `${SELECT} and m.account_id = ? and (?::text is null or m.organization_id = ?) order by lower(o.name), o.id`,
    [actor.personId, actor.organizationId, actor.organizationId],
  );
  return { object: 'list' as const, data: rows.map(view) };
}

/** One organization the actor belongs to, with its wallet's balance. */
export async function getOrganization(em: EntityManager, actor: Actor, id: string): Promise<OrganizationView> {
  await requireRole(em, actor, id, 'member');
  const [row] = await em.execute<Row[]>(`${SELECT} and m.organization_id = ? and m.account_id = ?`, [id, actor.personId]);
  if (!row) throw organizationNotFound(id);
  return { ...view(row), balance: balanceView(await getBalance(em, id)) };
}

/** Whether the account is an organization (its wallet is shared), for callers that show a wallet. */
export async function isOrganization(em: EntityManager, accountId: string): Promise<boolean> {
  const [row] = await em.execute<{ kind: string }[]>('select kind from accounts where id = ?', [accountId]);
  return row?.kind === 'organization';
}

/**
 * Deletes an organization (owners): its keys and app connections stop at once, its invitations
 * are revoked, its members leave, and it disappears from every list; its ledger stays (an
 * account row, disabled, as an operator's disable leaves one). Refused while its wallet holds
 * coins (spend them, or ask the operator for a refund) or a plan is running (cancel it in the
 * billing portal first): coins and a subscription are never lost by a click.
 */
export async function deleteOrganization(em: EntityManager, actor: Actor, id: string, now: Date) {
  return em.transactional(async (tx) => {
    await requireRole(tx, actor, id, 'owner', { lock: true });
    const [wallet] = await tx.execute<{ coins: string }[]>(
      'select (subscription_micro + purchased_micro + held_micro)::text as coins from wallets where account_id = ? for update',
      [id],
    );
    if (wallet && BigInt(wallet.coins) !== 0n) {
      throw new CoreError('conflict', 'This organization’s wallet is not empty: spend its coins (or ask the operator for a refund) before deleting it.', { reason: 'organization_has_balance', param: 'id' });
    }
    const [plan] = await tx.execute('select 1 from subscriptions where account_id = ? and ended_at is null limit 1', [id]);
    if (plan) {
      throw new CoreError('conflict', 'This organization has a running plan: cancel it in the billing portal before deleting the organization.', { reason: 'organization_has_subscription', param: 'id' });
    }
    await tx.execute('update auto_top_ups set enabled = false, disabled_reason = ?, disabled_at = ? where account_id = ? and enabled', ['organization_deleted', now, id]);
    const keys = await tx.execute<{ id: string }[]>('update api_keys set revoked_at = ? where account_id = ? and revoked_at is null returning id', [now, id]);
    await tx.execute('update app_connections set revoked_at = ? where account_id = ? and revoked_at is null', [now, id]);
    await tx.execute('update organization_invitations set revoked_at = ? where organization_id = ? and accepted_at is null and revoked_at is null', [now, id]);
    await tx.execute('delete from organization_members where organization_id = ?', [id]);
    await tx.execute('update accounts set disabled_at = ? where id = ?', [now, id]);
    return { id, object: 'organization' as const, deleted: true as const, keys_revoked: keys.length };
  });
}
