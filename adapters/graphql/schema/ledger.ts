import { LEDGER_KINDS, type LedgerKind as Kind } from '../../../core/money/ledger.ts';
import { builder } from '../builder.ts';
import { Account } from './account.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

const LedgerKind = builder.enumType('LedgerKind', {
  values: LEDGER_KINDS,
});
const Pocket = builder.enumType('Pocket', { values: ['subscription', 'purchased', 'held'] as const });

interface LedgerEntryShape {
  id: string;
  account: string;
  pocket: 'subscription' | 'purchased' | 'held';
  kind: Kind;
  amount_coins: number;
  balance_after_coins: number;
  reference: string;
  hold_id: string | null;
  description: string;
  created_at: string;
}

interface ServedRouteShape {
  provider: string;
  model: string | null;
}

const ServedRoute = builder.objectRef<ServedRouteShape>('ServedRoute').implement({
  description: 'The route that served a request: a provider of the catalog and the model\'s name there (docs/providers.md, "Routes").',
  fields: (t) => ({
    provider: t.exposeString('provider'),
    model: t.exposeString('model', { nullable: true, description: "The model's name at the provider." }),
  }),
});

export const LedgerEntry = builder.objectRef<LedgerEntryShape>('LedgerEntry').implement({
  description: 'One entry of the append-only ledger: a signed amount in one pocket.',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`le_…`' }),
    account: t.field({ type: Account, resolve: (e) => e.account }),
    pocket: t.field({ type: Pocket, resolve: (e) => e.pocket }),
    kind: t.field({ type: LedgerKind, resolve: (e) => e.kind }),
    amountCoins: t.expose('amount_coins', { type: 'Coins' }),
    balanceAfterCoins: t.expose('balance_after_coins', { type: 'Coins', description: "The pocket's balance right after this entry." }),
    reference: t.exposeString('reference', { description: 'The job, chat completion or payment the entry was written for.' }),
    holdId: t.exposeString('hold_id', { nullable: true }),
    description: t.exposeString('description'),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    route: t.loadable({
      type: ServedRoute,
      nullable: true,
      description:
        'The route that served the chat or job this entry is about (its reference), from its completion record or job; null for a payment, an adjustment, or a request from before routes were recorded. Loaded for a whole page in one query.',
      load: async (references: string[], ctx) => {
        const { data } = await ctx.core.admin.analytics.routesServed({ references });
        const byReference = new Map(data.map((r) => [r.reference, r]));
        return references.map((r) => byReference.get(r) ?? null);
      },
      loaderOptions: { maxBatchSize: 500 },
      resolve: (e) => e.reference,
    }),
  }),
});

export const LedgerEntryConnection = builder.connectionObject({ type: LedgerEntry, name: 'LedgerEntryConnection' });

export const LedgerFilter = builder.inputType('LedgerFilter', {
  fields: (t) => ({
    kind: t.field({ type: LedgerKind }),
    pocket: t.field({ type: Pocket }),
    reference: t.string(),
    holdId: t.string(),
    ...timeRangeFields(t),
  }),
});

type LedgerArgs = { first?: number | null; after?: string | null; filter?: { kind?: LedgerEntryShape['kind'] | null; pocket?: LedgerEntryShape['pocket'] | null; reference?: string | null; holdId?: string | null; since?: string | null; until?: string | null } | null };

export const ledgerInput = (account: string | null | undefined, args: LedgerArgs) => {
  const f = args.filter ?? {};
  return { ...pageOf(args), ...present({ account, kind: f.kind, pocket: f.pocket, reference: f.reference, hold: f.holdId, since: f.since, until: f.until }) };
};

builder.queryField('ledgerEntries', (t) =>
  t.field({
    type: LedgerEntryConnection,
    description: 'Raw ledger entries, newest first.',
    args: { ...pageArgs(t.arg), account: t.arg.id(), filter: t.arg({ type: LedgerFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => connection(await ctx.core.admin.read.ledger.list(ledgerInput(args.account, args))),
  }),
);

builder.objectField(Account, 'ledgerEntries', (t) =>
  t.field({
    type: LedgerEntryConnection,
    args: { ...pageArgs(t.arg), filter: t.arg({ type: LedgerFilter }) },
    complexity: pageComplexity,
    resolve: async (a, args, ctx) => connection(await ctx.core.admin.read.ledger.list(ledgerInput(a.id, args))),
  }),
);
