import { builder } from '../builder.ts';
import type { GraphQLContext } from '../context.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

/** Loaded in batches: every Account a request names costs one query per batch (core: admin.read.accounts.byIds). */
export const Account = builder.loadableObject('Account', {
  description: 'A customer account.',
  load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.accounts.byIds({ ids })).data,
  sort: (a) => a.id,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    id: t.exposeID('id', { description: '`acct_…`' }),
    email: t.exposeString('email'),
    paidAccount: t.exposeBoolean('paid_account', { description: 'true after a first top-up or subscription grant' }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    disabledAt: t.expose('disabled_at', { type: 'DateTime', nullable: true, description: 'Set while the account is disabled: its keys, app tokens and sessions are refused.' }),
  }),
});

export const AccountConnection = builder.connectionObject({ type: Account, name: 'AccountConnection' });

const AccountFilter = builder.inputType('AccountFilter', {
  fields: (t) => ({
    emailPrefix: t.string({ description: 'The start of the email, any case (uses an index).' }),
    emailContains: t.string({ description: 'Any part of the email, any case (reads every account).' }),
    paid: t.boolean(),
    disabled: t.boolean(),
    ...timeRangeFields(t),
  }),
});

builder.queryFields((t) => ({
  account: t.field({
    type: Account,
    nullable: true,
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args) => args.id,
  }),
  accounts: t.field({
    type: AccountConnection,
    description: 'Accounts of people, newest first (organizations are listed by `organizations`).',
    args: { ...pageArgs(t.arg), filter: t.arg({ type: AccountFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => {
      const f = args.filter ?? {};
      const filter = present({ email_prefix: f.emailPrefix, email_contains: f.emailContains, paid: f.paid, disabled: f.disabled, since: f.since, until: f.until });
      return connection(await ctx.core.admin.read.accounts.list({ ...pageOf(args), ...filter }));
    },
  }),
}));

const AccountStateInput = builder.inputType('AccountStateInput', {
  fields: (t) => ({
    account: t.string({ required: true, description: 'An account id or email.' }),
    reason: t.string({ required: true, description: 'Why, for the audit log.' }),
  }),
});

const EndSessionsInput = builder.inputType('EndSessionsInput', {
  fields: (t) => ({
    account: t.string({ required: true, description: 'An account id or email.' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

const EndedSessions = builder.objectRef<{ id: string; sessions_ended: number }>('EndedSessions').implement({
  fields: (t) => ({
    account: t.field({ type: Account, resolve: (r) => r.id }),
    sessionsEnded: t.exposeInt('sessions_ended', { description: 'How many sessions ended.' }),
  }),
});

builder.mutationFields((t) => ({
  disableAccount: t.field({
    type: Account,
    description: 'Disables an account: its keys, app tokens and sessions are refused at once. Running jobs finish.',
    args: { input: t.arg({ type: AccountStateInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.actions.disableAccount(input)).id,
  }),
  enableAccount: t.field({
    type: Account,
    args: { input: t.arg({ type: AccountStateInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.actions.enableAccount(input)).id,
  }),
  endAccountSessions: t.field({
    type: EndedSessions,
    description: "Signs the account's person out of the account pages everywhere, at once; keys and app connections are not touched.",
    args: { input: t.arg({ type: EndSessionsInput, required: true }) },
    resolve: (_root, { input }, ctx) => ctx.core.admin.actions.endSessions(present({ account: input.account, reason: input.reason })),
  }),
}));
