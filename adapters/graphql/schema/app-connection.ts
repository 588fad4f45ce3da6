import type { AdminAppConnectionView } from '../../../core/admin/reads/app-connections.ts';
import { builder } from '../builder.ts';
import { Account } from './account.ts';
import { ApiKey } from './key.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

export const AppConnection = builder.objectRef<AdminAppConnectionView>('AppConnection').implement({
  description: 'An app connected through OAuth: it spends through its own key, within its spend cap.',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`app_…`' }),
    account: t.field({ type: Account, resolve: (c) => c.account }),
    key: t.field({ type: ApiKey, resolve: (c) => c.key }),
    clientId: t.exposeString('client_id'),
    name: t.exposeString('name', { description: "The app's client_name." }),
    redirectHost: t.exposeString('redirect_host', { description: 'The host the app signs in through: a name can lie, this cannot.' }),
    spendCapCoins: t.expose('spend_cap_coins', { type: 'Coins', nullable: true }),
    spentCoins: t.expose('spent_coins', { type: 'Coins' }),
    expiresAt: t.expose('expires_at', { type: 'DateTime', nullable: true }),
    createdAt: t.expose('created_at', { type: 'DateTime', description: 'When the app was first connected.' }),
    reconnectedAt: t.expose('reconnected_at', { type: 'DateTime', nullable: true, description: 'When the person last connected the app again, which replaced its tokens, cap and lifetime.' }),
    lastUsedAt: t.expose('last_used_at', { type: 'DateTime', nullable: true }),
    revokedAt: t.expose('revoked_at', { type: 'DateTime', nullable: true }),
  }),
});

const AppConnectionConnection = builder.connectionObject({ type: AppConnection, name: 'AppConnectionConnection' });

const AppConnectionFilter = builder.inputType('AppConnectionFilter', { fields: (t) => ({ revoked: t.boolean(), ...timeRangeFields(t) }) });

type AppArgs = { first?: number | null; after?: string | null; filter?: { revoked?: boolean | null; since?: string | null; until?: string | null } | null };

const appInput = (account: string | null | undefined, args: AppArgs) => {
  const f = args.filter ?? {};
  return { ...pageOf(args), ...present({ account, revoked: f.revoked, since: f.since, until: f.until }) };
};

builder.queryField('appConnections', (t) =>
  t.field({
    type: AppConnectionConnection,
    description: 'Apps connected through OAuth, of every account, newest first.',
    args: { ...pageArgs(t.arg), account: t.arg.id(), filter: t.arg({ type: AppConnectionFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => connection(await ctx.core.admin.read.appConnections.list(appInput(args.account, args))),
  }),
);

builder.objectField(Account, 'appConnections', (t) =>
  t.field({
    type: AppConnectionConnection,
    args: { ...pageArgs(t.arg), filter: t.arg({ type: AppConnectionFilter }) },
    complexity: pageComplexity,
    resolve: async (a, args, ctx) => connection(await ctx.core.admin.read.appConnections.list(appInput(a.id, args))),
  }),
);

const RevokedAppConnection = builder.objectRef<{ id: string; account: string; revoked: true }>('RevokedAppConnection').implement({
  fields: (t) => ({
    id: t.exposeID('id'),
    account: t.field({ type: Account, resolve: (c) => c.account }),
    revoked: t.exposeBoolean('revoked'),
  }),
});

builder.mutationField('revokeAppConnection', (t) =>
  t.field({
    type: RevokedAppConnection,
    description: 'Revokes any app connection and its key, at once and for good.',
    args: { id: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: (_root, args, ctx) => ctx.core.admin.actions.revokeAppConnection(present({ id: args.id, reason: args.reason })),
  }),
);
