import { builder } from '../builder.ts';
import type { GraphQLContext } from '../context.ts';
import { Account } from './account.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

const ApiKeyKind = builder.enumType('ApiKeyKind', {
  values: {
    standard: { description: 'Made by the account or an operator.' },
    app: { description: 'The key of an app connected through OAuth.' },
    management: { description: 'Manages keys and organizations through REST; never calls models.' },
  } as const,
});

/** Loaded in batches (core: admin.read.keys.byIds). Never the secret or its hash: core does not read them. */
export const ApiKey = builder.loadableObject('ApiKey', {
  description: 'An API key, without its secret.',
  load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.keys.byIds({ ids })).data,
  sort: (k) => k.id,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    id: t.exposeID('id', { description: '`key_…`' }),
    account: t.field({ type: Account, resolve: (k) => k.account }),
    name: t.exposeString('name'),
    prefix: t.exposeString('prefix', { description: 'The start of the secret, to recognise the key.' }),
    kind: t.field({ type: ApiKeyKind, resolve: (k) => k.kind }),
    type: t.field({ type: ApiKeyType, description: 'As REST /api/v1/keys says it: `management` or `standard`.', resolve: (k) => (k.kind === 'management' ? 'management' : 'standard') }),
    organizationId: t.exposeID('organization_id', { nullable: true, description: "`org_…`: the organization whose wallet the key spends from; null: the person's own wallet." }),
    userId: t.exposeID('user_id', { description: '`acct_…`: the person the key belongs to.' }),
    disabled: t.boolean({ description: 'A disabled key is refused (401, saying so) until its owner enables it again.', resolve: (k) => k.disabled_at !== null }),
    disabledAt: t.expose('disabled_at', { type: 'DateTime', nullable: true }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    lastUsedAt: t.expose('last_used_at', { type: 'DateTime', nullable: true }),
    revokedAt: t.expose('revoked_at', { type: 'DateTime', nullable: true }),
  }),
});

const ApiKeyType = builder.enumType('ApiKeyType', {
  values: { standard: { description: 'Calls models (an app key too).' }, management: { description: 'Manages keys and organizations; never calls models.' } } as const,
});

export const ApiKeyConnection = builder.connectionObject({ type: ApiKey, name: 'ApiKeyConnection' });

export const ApiKeyFilter = builder.inputType('ApiKeyFilter', {
  fields: (t) => ({ kind: t.field({ type: ApiKeyKind }), revoked: t.boolean(), ...timeRangeFields(t) }),
});

type KeyArgs = { first?: number | null; after?: string | null; filter?: { kind?: 'standard' | 'app' | 'management' | null; revoked?: boolean | null; since?: string | null; until?: string | null } | null };

export const keyInput = (account: string | null | undefined, args: KeyArgs) => {
  const f = args.filter ?? {};
  return { ...pageOf(args), ...present({ account, kind: f.kind, revoked: f.revoked, since: f.since, until: f.until }) };
};

builder.queryFields((t) => ({
  apiKey: t.field({ type: ApiKey, nullable: true, args: { id: t.arg.id({ required: true }) }, resolve: (_root, args) => args.id }),
  apiKeys: t.field({
    type: ApiKeyConnection,
    description: 'API keys of every account, newest first.',
    args: { ...pageArgs(t.arg), account: t.arg.id(), filter: t.arg({ type: ApiKeyFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => connection(await ctx.core.admin.read.keys.list(keyInput(args.account, args))),
  }),
}));

builder.objectField(Account, 'apiKeys', (t) =>
  t.field({
    type: ApiKeyConnection,
    args: { ...pageArgs(t.arg), filter: t.arg({ type: ApiKeyFilter }) },
    complexity: pageComplexity,
    resolve: async (a, args, ctx) => connection(await ctx.core.admin.read.keys.list(keyInput(a.id, args))),
  }),
);

builder.mutationField('revokeKey', (t) =>
  t.field({
    type: ApiKey,
    description: "Revokes any key; it is refused on its next use. An app's key ends its connection's access too.",
    args: { id: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: async (_root, args, ctx) => (await ctx.core.keys.revoke(present({ id: args.id, reason: args.reason }))).id,
  }),
);
