import type { AdminModelView } from '../../../core/admin/models/schema.ts';
import { builder } from '../builder.ts';
import type { GraphQLContext } from '../context.ts';
import { connection, pageArgs, pageComplexity, pageOf, present } from './paging.ts';

/** GraphQL names cannot start with a digit: the 3D type is `three_d` here, `3d` everywhere else. */
export const ModelType = builder.enumType('ModelType', {
  values: { text: { value: 'text' }, image: { value: 'image' }, video: { value: 'video' }, audio: { value: 'audio' }, three_d: { value: '3d' } } as const,
});

const PriceInForce = builder.objectRef<AdminModelView['prices_in_force']>('ModelPriceInForce').implement({
  fields: (t) => ({
    effectiveFrom: t.expose('effective_from', { type: 'DateTime', nullable: true, description: 'null: the base price of the entry.' }),
    pricing: t.expose('pricing', { type: 'JSON', description: 'In-app prices, as written.' }),
  }),
});

const ScheduledPrice = builder.objectRef<AdminModelView['price_schedule'][number]>('ScheduledModelPrice').implement({
  fields: (t) => ({
    effectiveFrom: t.expose('effective_from', { type: 'DateTime' }),
    pricing: t.expose('pricing', { type: 'JSON', description: 'In-app prices, as written.' }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    createdBy: t.exposeString('created_by', { description: '`admin_token:adm_…`, `admin_user:adu_…` or `internal`' }),
  }),
});

/** Loaded in batches (core: admin.read.models.byIds): disabled models and invalid entries too. */
export const Model = builder.loadableObject('Model', {
  description: 'A model of the catalog, as operators see it.',
  load: async (ids: string[], ctx: GraphQLContext) => (await ctx.core.admin.read.models.byIds({ ids })).data,
  sort: (m) => m.id,
  loaderOptions: { maxBatchSize: 500 },
  fields: (t) => ({
    id: t.exposeID('id'),
    type: t.field({ type: ModelType, resolve: (m) => m.type }),
    name: t.string({ resolve: (m) => m.api?.name ?? (typeof m.definition.name === 'string' ? m.definition.name : m.id) }),
    enabled: t.exposeBoolean('enabled', { description: 'false: refused for new chats and jobs, as an unknown model is.' }),
    disabledAt: t.expose('disabled_at', { type: 'DateTime', nullable: true }),
    pricing: t.field({ type: 'JSON', nullable: true, description: 'API prices in force, as GET /api/v1/models shows them; null when the entry is invalid.', resolve: (m) => m.api?.pricing ?? null }),
    pricesInForce: t.field({ type: PriceInForce, resolve: (m) => m.prices_in_force }),
    priceSchedule: t.field({ type: [ScheduledPrice], description: 'Every scheduled price, oldest first: the past ones are history.', resolve: (m) => m.price_schedule }),
    definition: t.expose('definition', { type: 'JSON', description: 'The catalog entry as stored (in-app prices; its pricing is the base price).' }),
    api: t.expose('api', { type: 'JSON', nullable: true, description: 'The model as the API shows it now; null when the stored entry is invalid.' }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    updatedAt: t.expose('updated_at', { type: 'DateTime' }),
  }),
});

const ModelConnection = builder.connectionObject({ type: Model, name: 'ModelConnection' });

const ModelFilter = builder.inputType('ModelFilter', { fields: (t) => ({ type: t.field({ type: ModelType }), enabled: t.boolean() }) });

builder.queryFields((t) => ({
  model: t.field({ type: Model, nullable: true, args: { id: t.arg.id({ required: true }) }, resolve: (_root, args) => args.id }),
  models: t.field({
    type: ModelConnection,
    description: 'Every model in the database, enabled or not, in id order.',
    args: { ...pageArgs(t.arg), filter: t.arg({ type: ModelFilter }) },
    complexity: pageComplexity,
    resolve: async (_root, args, ctx) =>
      connection(await ctx.core.admin.read.models.list({ ...pageOf(args), ...present({ type: args.filter?.type, enabled: args.filter?.enabled }) })),
  }),
}));
