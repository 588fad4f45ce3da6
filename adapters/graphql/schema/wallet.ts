import { builder } from '../builder.ts';
import type { GraphQLContext } from '../context.ts';
import { Account } from './account.ts';
import { CoreError, invalid } from '../../../core/errors.ts';
import { toCoreError } from '../../../core/trpc.ts';
import { present } from './paging.ts';

interface WalletShape {
  account: string;
  coins: number;
  subscription_coins: number;
  purchased_coins: number;
  held_coins: number;
  paid_account: boolean;
}

/** An account's wallet, loaded in batches by account id (core: admin.read.wallets.byAccountIds). */
export const Wallet = builder.loadableObject('Wallet', {
  description: 'The pockets of an account: what it can spend, and what open reservations hold.',
  load: async (accountIds: string[], ctx: GraphQLContext): Promise<WalletShape[]> => (await ctx.core.admin.read.wallets.byAccountIds({ ids: accountIds })).data,
  sort: (w) => w.account,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    account: t.field({ type: Account, resolve: (w) => w.account }),
    coins: t.expose('coins', { type: 'Coins', description: 'What can be spent now: subscription + purchased.' }),
    subscriptionCoins: t.expose('subscription_coins', { type: 'Coins' }),
    purchasedCoins: t.expose('purchased_coins', { type: 'Coins' }),
    heldCoins: t.expose('held_coins', { type: 'Coins', description: 'What open reservations hold.' }),
    paidAccount: t.exposeBoolean('paid_account'),
  }),
});

builder.objectField(Account, 'wallet', (t) => t.field({ type: Wallet, resolve: (a) => a.id }));

/** What a money mutation answers (core's credit and adjustment results). */
interface MoneyResult {
  object: string;
  account: string;
  coins: number;
  applied: boolean;
  entry_id: string | null;
  balance: Omit<WalletShape, 'account'>;
}

export const MoneyPayload = builder.objectRef<MoneyResult>('MoneyPayload').implement({
  description: 'A top-up, subscription grant or adjustment, and the wallet after it.',
  fields: (t) => ({
    kind: t.exposeString('object', { description: '`topup`, `subscription_grant` or `adjustment`' }),
    account: t.field({ type: Account, resolve: (r) => r.account }),
    coins: t.expose('coins', { type: 'Coins' }),
    applied: t.exposeBoolean('applied', { description: 'false: the idempotency key had been used; the first change stands and nothing moved.' }),
    entryId: t.exposeID('entry_id', { nullable: true, description: '`le_…`: the ledger entry written (or the first one, on a repeat).' }),
    wallet: t.field({ type: Wallet, resolve: (r) => ({ account: r.account, ...r.balance }) }),
  }),
});

const OWNER_DESCRIPTION = { account: 'An account id or email; or `organizationId` instead.', organization: "`org_…`: credits the organization's wallet instead of an account's." };

const CreditInput = builder.inputType('CreditInput', {
  fields: (t) => ({
    account: t.string({ description: OWNER_DESCRIPTION.account }),
    organizationId: t.id({ description: OWNER_DESCRIPTION.organization }),
    coins: t.field({ type: 'Coins', required: true }),
    idempotencyKey: t.string({ description: 'Makes a retried credit count once.' }),
    reference: t.string({ description: 'The payment or grant this credit is for.' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

/**
 * The wallet a money mutation is about, as core takes it: `account` or `organizationId`, exactly
 * one (GraphQL cannot say "one of two"; the error names the field).
 */
function walletOwner(input: { account?: string | null; organizationId?: string | null }): { account: string } | { organization: string } {
  const account = input.account ?? undefined;
  const organization = input.organizationId ?? undefined;
  if (account !== undefined && organization !== undefined) throw invalid('organizationId', 'Give either `account` or `organizationId`, not both.', 'account_or_organization');
  if (organization !== undefined) return { organization };
  if (account === undefined) throw invalid('account', 'Give `account` (an account id or email) or `organizationId` (org_…).', 'account_or_organization');
  return { account };
}

/** Core names the organization `organization`; this API's field is `organizationId`: an error about it says so. */
const namingOrganizationId = <T>(work: Promise<T>): Promise<T> =>
  work.catch((err: unknown) => {
    const core = toCoreError(err);
    if (core?.param !== 'organization') throw err;
    throw new CoreError(core.code, core.message, { param: 'organizationId', reason: core.reason, retryAfterSeconds: core.retryAfterSeconds, params: core.params });
  });

const credit = (input: { account?: string | null; organizationId?: string | null; coins: string; idempotencyKey?: string | null; reference?: string | null; reason?: string | null }) => ({
  ...walletOwner(input),
  ...present({ coins: input.coins, idempotency_key: input.idempotencyKey, reference: input.reference, reason: input.reason }),
});

const AdjustBalanceInput = builder.inputType('AdjustBalanceInput', {
  fields: (t) => ({
    account: t.string({ description: OWNER_DESCRIPTION.account }),
    organizationId: t.id({ description: "`org_…`: corrects the organization's wallet instead of an account's." }),
    coins: t.field({ type: 'Coins', required: true, description: 'Signed: "+12.5" adds purchased coins; "-3" takes purchased coins first, then subscription coins, never held ones.' }),
    reason: t.string({ required: true, description: 'Why, for the audit log (never shown to the customer).' }),
    customerNote: t.string({ required: false, description: "What the customer reads beside the adjustment in their history (at most 200 characters), such as 'Goodwill credit for the outage of 27 Nov'. Without it the history says only that the operator corrected the balance." }),
    idempotencyKey: t.string({ required: true, description: 'Makes a retried adjustment count once.' }),
  }),
});

builder.mutationFields((t) => ({
  topUp: t.field({
    type: MoneyPayload,
    description: "Adds purchased coins to an account's or an organization's wallet (it becomes paid).",
    args: { input: t.arg({ type: CreditInput, required: true }) },
    resolve: (_root, { input }, ctx) => namingOrganizationId(ctx.core.wallet.topUp(credit(input))),
  }),
  grantSubscription: t.field({
    type: MoneyPayload,
    description: 'Adds subscription coins (the account becomes paid).',
    args: { input: t.arg({ type: CreditInput, required: true }) },
    resolve: (_root, { input }, ctx) => namingOrganizationId(ctx.core.wallet.grantSubscription(credit(input))),
  }),
  adjustBalance: t.field({
    type: MoneyPayload,
    description: "Corrects an account's or an organization's balance up or down, with a reason.",
    args: { input: t.arg({ type: AdjustBalanceInput, required: true }) },
    resolve: (_root, { input }, ctx) =>
      namingOrganizationId(ctx.core.admin.actions.adjustBalance({ ...walletOwner(input), coins: input.coins, reason: input.reason, idempotency_key: input.idempotencyKey, ...(input.customerNote ? { customer_note: input.customerNote } : {}) })),
  }),
}));
