import { SEARCH_ATTRIBUTES } from '../../../workflows/shared.ts';
import { builder } from '../builder.ts';
import type { GraphQLContext, TemporalUi } from '../context.ts';
import { Account } from './account.ts';
import { ApiKey } from './key.ts';
import { Model } from './model.ts';
import { connection, pageArgs, pageComplexity, pageOf, present, timeRangeFields } from './paging.ts';

const GenerationStatus = builder.enumType('GenerationStatus', { values: ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const });

const GenerationOutput = builder.objectRef<{ url: string; expires_at: string; mime_type: string; bytes: number }>('GenerationOutput').implement({
  fields: (t) => ({
    url: t.exposeString('url', { description: 'A signed link to the result, valid until expiresAt.' }),
    expiresAt: t.expose('expires_at', { type: 'DateTime' }),
    mimeType: t.exposeString('mime_type'),
    bytes: t.exposeInt('bytes'),
  }),
});

const GenerationError = builder.objectRef<{ message: string; code: string }>('GenerationError').implement({
  fields: (t) => ({ message: t.exposeString('message'), code: t.exposeString('code') }),
});

/** The job's workflow in the Temporal Web UI; Temporal opens the latest run of a workflow id. */
export function temporalUiUrl(temporal: TemporalUi, workflowId: string): string | null {
  if (!temporal.uiUrl) return null;
  return `${temporal.uiUrl.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(temporal.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/**
 * The UI's workflow list filtered to one account's jobs: `MasAccountId = "acct_…"`, the search
 * attribute every job's workflow carries (docs/operations.md lists the others).
 */
export function temporalAccountJobsUrl(temporal: TemporalUi, accountId: string): string | null {
  if (!temporal.uiUrl) return null;
  const query = `${SEARCH_ATTRIBUTES.accountId.name} = "${accountId}"`;
  return `${temporal.uiUrl.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(temporal.namespace)}/workflows?query=${encodeURIComponent(query)}`;
}

builder.objectFields(Account, (t) => ({
  temporalJobsUrl: t.string({
    nullable: true,
    description: "The account's job workflows in the Temporal Web UI (filtered by MasAccountId); null when the UI's address is not known (TEMPORAL_UI_URL).",
    resolve: (account, _args, ctx) => temporalAccountJobsUrl(ctx.temporal, account.id),
  }),
}));

/** Loaded in batches (core: admin.read.generations.byIds). */
export const Generation = builder.loadableObject('Generation', {
  description: 'A media job, with its Temporal workflow.',
  load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.generations.byIds({ ids })).data,
  sort: (g) => g.id,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    id: t.exposeID('id', { description: '`gen_…`' }),
    account: t.field({ type: Account, resolve: (g) => g.account }),
    key: t.field({ type: ApiKey, resolve: (g) => g.key }),
    model: t.field({ type: Model, nullable: true, description: 'Null when the model has since left the catalog.', resolve: (g) => g.model }),
    modelId: t.exposeString('model'),
    status: t.field({ type: GenerationStatus, resolve: (g) => g.status }),
    prompt: t.exposeString('prompt'),
    settings: t.expose('settings', { type: 'JSON' }),
    inputs: t.expose('inputs', { type: 'JSON' }),
    priceCoins: t.expose('price_coins', { type: 'Coins', description: 'Reserved when the job was accepted.' }),
    costCoins: t.expose('cost_coins', { type: 'Coins', nullable: true, description: 'The final charge (captured), once the job has ended.' }),
    provider: t.exposeString('provider', { nullable: true, description: "The provider of the route that took the job (the catalog's provider name); null before it was submitted." }),
    routeModel: t.exposeString('route_model', { nullable: true, description: "The model's name at that provider." }),
    upstreamCostCoins: t.expose('upstream_cost_coins', {
      type: 'Coins',
      nullable: true,
      description: "What the job cost upstream, from the route's cost in the catalog; null until it succeeded, or when the route names no cost.",
    }),
    error: t.field({ type: GenerationError, nullable: true, resolve: (g) => g.error }),
    output: t.field({ type: GenerationOutput, nullable: true, resolve: (g) => g.output }),
    webhookUrl: t.exposeString('webhook_url', { nullable: true }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    startedAt: t.expose('started_at', { type: 'DateTime', nullable: true }),
    completedAt: t.expose('completed_at', { type: 'DateTime', nullable: true }),
    holdId: t.exposeString('hold_id'),
    workflowId: t.exposeString('workflow_id', { description: "The Temporal workflow id: the job's id." }),
    runId: t.exposeString('run_id', { nullable: true, description: 'The Temporal run id of its workflow, recorded when it started (null for a job whose workflow has not started)' }),
    traceId: t.exposeString('trace_id', {
      nullable: true,
      description:
        "The OpenTelemetry trace id of the request that submitted the job: one trace with the submit, the workflow, its activities, the upstream calls and the settle or refund (docs/observability.md). Null when tracing was off or the request was not sampled.",
    }),
    temporalUiUrl: t.string({
      nullable: true,
      description:
        "The job's workflow in the Temporal Web UI (its history, and its search attributes MasAccountId, MasKeyId, MasModel, MasModelType and MasJobStatus to filter on: docs/operations.md); null when the UI's address is not known (TEMPORAL_UI_URL).",
      resolve: (g, _args, ctx) => temporalUiUrl(ctx.temporal, g.workflow_id),
    }),
  }),
});

const GenerationConnection = builder.connectionObject({ type: Generation, name: 'GenerationConnection' });

const GenerationFilter = builder.inputType('GenerationFilter', {
  fields: (t) => ({
    key: t.id({ description: '`key_…`' }),
    model: t.string(),
    status: t.field({ type: GenerationStatus }),
    ...timeRangeFields(t),
  }),
});

type GenerationArgs = {
  first?: number | null;
  after?: string | null;
  filter?: { key?: string | null; model?: string | null; status?: 'queued' | 'running' | 'succeeded' | 'failed' | 'canceled' | null; since?: string | null; until?: string | null } | null;
};

const generationInput = (account: string | null | undefined, args: GenerationArgs) => {
  const f = args.filter ?? {};
  return { ...pageOf(args), ...present({ account, key: f.key, model: f.model, status: f.status, since: f.since, until: f.until }) };
};

builder.queryFields((t) => ({
  generation: t.field({ type: Generation, nullable: true, args: { id: t.arg.id({ required: true }) }, resolve: (_root, args) => args.id }),
  generations: t.field({
    type: GenerationConnection,
    description: 'Media jobs of every account, newest first.',
    args: { ...pageArgs(t.arg), account: t.arg.id(), filter: t.arg({ type: GenerationFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) => connection(await ctx.core.admin.read.generations.list(generationInput(args.account, args))),
  }),
}));

builder.objectField(Account, 'generations', (t) =>
  t.field({
    type: GenerationConnection,
    args: { ...pageArgs(t.arg), filter: t.arg({ type: GenerationFilter }) },
    complexity: pageComplexity,
    resolve: async (a, args, ctx) => connection(await ctx.core.admin.read.generations.list(generationInput(a.id, args))),
  }),
);

const RefundPayload = builder
  .objectRef<{ generation: string; account: string; refunded_coins: number; applied: boolean; entry_id: string | null }>('GenerationRefund')
  .implement({
    fields: (t) => ({
      generation: t.field({ type: Generation, resolve: (r) => r.generation }),
      account: t.field({ type: Account, resolve: (r) => r.account }),
      refundedCoins: t.expose('refunded_coins', { type: 'Coins' }),
      applied: t.exposeBoolean('applied', { description: 'false: it had been refunded already; nothing moved.' }),
      entryId: t.exposeID('entry_id', { nullable: true }),
    }),
  });

builder.mutationFields((t) => ({
  cancelGeneration: t.field({
    type: Generation,
    description: "Cancels any account's unfinished job and refunds its price in full.",
    args: { id: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: async (_root, args, ctx) => (await ctx.core.admin.actions.cancelGeneration(present({ id: args.id, reason: args.reason }))).id,
  }),
  refundGeneration: t.field({
    type: RefundPayload,
    description: 'Gives back what a succeeded job was charged, once.',
    args: { id: t.arg.id({ required: true }), reason: t.arg.string({ required: true }) },
    resolve: (_root, args, ctx) => ctx.core.admin.actions.refundGeneration({ id: args.id, reason: args.reason }),
  }),
}));
