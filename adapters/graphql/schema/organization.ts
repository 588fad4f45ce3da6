import type { AdminOrganizationView } from '../../../core/admin/reads/organizations.ts';
import { builder } from '../builder.ts';
import type { GraphQLContext } from '../context.ts';
import { Account } from './account.ts';
import { ApiKey, ApiKeyConnection, ApiKeyFilter, keyInput } from './key.ts';
import { LedgerEntryConnection, LedgerFilter, ledgerInput } from './ledger.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';
import { MoneyPayload, Wallet } from './wallet.ts';

/**
 * Organizations for operators (docs/organizations.md, "Operators"): a team's shared wallet, its
 * members with their role, spend limit and spend, and its invitations (never their token). The
 * wallet, ledger and keys are an account's, read with the organization's `org_…` id. Reads only
 * here: an organization's balance changes with `topUp` and `adjustBalance` (wallet.ts).
 */

const OrganizationRole = builder.enumType('OrganizationRole', {
  values: {
    owner: { description: 'Everything, billing and deleting the organization.' },
    admin: { description: 'Members, invitations and every key of the organization.' },
    member: { description: 'Their own keys, within the limit set for them.' },
  } as const,
});
const SpendLimitPeriod = builder.enumType('SpendLimitPeriod', {
  values: { total: { description: 'Since the limit was set.' }, monthly: { description: 'Per calendar month, UTC.' } } as const,
});
const InvitationStatus = builder.enumType('InvitationStatus', { values: ['pending', 'accepted', 'revoked', 'expired'] as const });

/** Loaded in batches (core: admin.read.organizations.byIds). */
export const Organization = builder.loadableObject('Organization', {
  description: 'An organization: a team sharing one wallet, with members and roles.',
  load: async (ids: string[], ctx: GraphQLContext): Promise<AdminOrganizationView[]> => (await ctx.core.admin.read.organizations.byIds({ ids })).data,
  sort: (o) => o.id,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    id: t.exposeID('id', { description: '`org_…`' }),
    name: t.exposeString('name'),
    billingEmail: t.exposeString('billing_email', { description: "Where the organization's billing mail goes: the address of the owner who made it." }),
    paidAccount: t.exposeBoolean('paid_account', { description: 'true after a first top-up or subscription grant' }),
    memberCount: t.exposeInt('member_count'),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    disabledAt: t.expose('disabled_at', { type: 'DateTime', nullable: true }),
    wallet: t.field({ type: Wallet, description: "The organization's wallet (its members' organization keys spend from it).", resolve: (o) => o.id }),
  }),
});

interface MemberShape {
  organization_id: string;
  user_id: string;
  email: string;
  role: 'owner' | 'admin' | 'member';
  spend_limit_coins: number | null;
  spend_limit_period: 'total' | 'monthly' | null;
  spent_coins: number;
  joined_at: string;
}

const OrganizationMember = builder.objectRef<MemberShape>('OrganizationMember').implement({
  description: "A person's place in an organization: their role, the spend limit an admin set for them, and what they spent.",
  fields: (t) => ({
    userId: t.exposeID('user_id', { description: "`acct_…`: the person's account." }),
    account: t.field({ type: Account, resolve: (m) => m.user_id }),
    email: t.exposeString('email'),
    role: t.field({ type: OrganizationRole, resolve: (m) => m.role }),
    spendLimitCoins: t.expose('spend_limit_coins', { type: 'Coins', nullable: true, description: 'The most the member may spend from the organization’s wallet in the period; null: no limit.' }),
    spendLimitPeriod: t.field({ type: SpendLimitPeriod, nullable: true, resolve: (m) => m.spend_limit_period }),
    spentCoins: t.expose('spent_coins', { type: 'Coins', description: 'Spent in the current period (this calendar month, UTC, without a limit), with what open requests hold.' }),
    joinedAt: t.expose('joined_at', { type: 'DateTime' }),
  }),
});

interface InvitationShape {
  id: string;
  organization_id: string;
  email: string;
  role: 'owner' | 'admin' | 'member';
  status: 'pending' | 'accepted' | 'revoked' | 'expired';
  created_at: string;
  expires_at: string;
}

const OrganizationInvitation = builder.objectRef<InvitationShape>('OrganizationInvitation').implement({
  description: 'An invitation to an organization, bound to one e-mail address. Its link (token) is never shown: only the invited address received it.',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`inv_…`' }),
    organization: t.field({ type: Organization, resolve: (i) => i.organization_id }),
    email: t.exposeString('email'),
    role: t.field({ type: OrganizationRole, resolve: (i) => i.role }),
    status: t.field({ type: InvitationStatus, resolve: (i) => i.status }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    expiresAt: t.expose('expires_at', { type: 'DateTime' }),
  }),
});
const OrganizationInvitationConnection = builder.connectionObject({ type: OrganizationInvitation, name: 'OrganizationInvitationConnection' });

interface MembershipShape {
  user_id: string;
  organization: string;
  role: 'owner' | 'admin' | 'member';
  spend_limit_coins: number | null;
  spend_limit_period: 'total' | 'monthly' | null;
  joined_at: string;
}

const OrganizationMembership = builder.objectRef<MembershipShape>('OrganizationMembership').implement({
  description: 'An organization a person belongs to, with their role there.',
  fields: (t) => ({
    organization: t.field({ type: Organization, resolve: (m) => m.organization }),
    role: t.field({ type: OrganizationRole, resolve: (m) => m.role }),
    spendLimitCoins: t.expose('spend_limit_coins', { type: 'Coins', nullable: true }),
    spendLimitPeriod: t.field({ type: SpendLimitPeriod, nullable: true, resolve: (m) => m.spend_limit_period }),
    joinedAt: t.expose('joined_at', { type: 'DateTime' }),
  }),
});

builder.objectFields(Organization, (t) => ({
  members: t.loadableGroup({
    type: OrganizationMember,
    description: 'Every member, oldest first (core: admin.read.organizations.membersByIds, one query for a whole page of organizations).',
    load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.organizations.membersByIds({ ids })).data,
    group: (m) => m.organization_id,
    resolve: (o) => o.id,
  }),
  invitations: t.field({
    type: OrganizationInvitationConnection,
    description: 'Invitations, newest first, every status.',
    args: { ...pageArgs(t.arg), status: t.arg({ type: InvitationStatus }) },
    complexity: pageComplexity,
    resolve: async (o, args, ctx) => connection(await ctx.core.admin.read.organizations.invitations({ organization: o.id, ...pageOf(args), ...present({ status: args.status }) })),
  }),
  apiKeys: t.field({
    type: ApiKeyConnection,
    description: "Keys spending from the organization's wallet (each belongs to one member: `userId`).",
    args: { ...pageArgs(t.arg), filter: t.arg({ type: ApiKeyFilter }) },
    complexity: pageComplexity,
    resolve: async (o, args, ctx) => connection(await ctx.core.admin.read.keys.list(keyInput(o.id, args))),
  }),
  ledgerEntries: t.field({
    type: LedgerEntryConnection,
    description: "The organization's ledger, newest first.",
    args: { ...pageArgs(t.arg), filter: t.arg({ type: LedgerFilter }) },
    complexity: pageComplexity,
    resolve: async (o, args, ctx) => connection(await ctx.core.admin.read.ledger.list(ledgerInput(o.id, args))),
  }),
}));

const OrganizationConnection = builder.connectionObject({ type: Organization, name: 'OrganizationConnection' });

const OrganizationFilter = builder.inputType('OrganizationFilter', {
  fields: (t) => ({
    nameContains: t.string({ description: 'Any part of the name, any case.' }),
    member: t.id({ description: '`acct_…`: only the organizations this person belongs to.' }),
    disabled: t.boolean(),
    ...timeRangeFields(t),
  }),
});

builder.queryFields((t) => ({
  organization: t.field({
    type: Organization,
    nullable: true,
    args: { id: t.arg.id({ required: true, description: '`org_…`' }) },
    resolve: (_root, args) => args.id,
  }),
  organizations: t.field({
    type: OrganizationConnection,
    description: 'Organizations, newest first.',
    args: { ...pageArgs(t.arg), filter: t.arg({ type: OrganizationFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => {
      const f = args.filter ?? {};
      const filter = present({ name_contains: f.nameContains, member: f.member, disabled: f.disabled, since: f.since, until: f.until });
      return connection(await ctx.core.admin.read.organizations.list({ ...pageOf(args), ...filter }));
    },
  }),
}));

builder.objectField(Account, 'organizations', (t) =>
  t.loadableGroup({
    type: OrganizationMembership,
    description: 'The organizations the person belongs to, by name (core: admin.read.organizations.ofPeople, one query for a whole page of accounts).',
    load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.organizations.ofPeople({ ids: ids.filter((id) => id.startsWith('acct_')) })).data,
    group: (m) => m.user_id,
    resolve: (a) => a.id,
  }),
);

builder.objectField(ApiKey, 'organization', (t) =>
  t.field({ type: Organization, nullable: true, description: 'The organization whose wallet the key spends from; null: a personal key.', resolve: (k) => k.organization_id }),
);

builder.objectField(MoneyPayload, 'organization', (t) =>
  t.field({ type: Organization, nullable: true, description: "The organization, when the wallet was an organization's.", resolve: (r) => (r.account.startsWith('org_') ? r.account : null) }),
);
