import { builder } from '../builder.ts';
import { Model } from './model.ts';
import { present } from './paging.ts';

/**
 * Operators' changes to the model catalog (core: admin.models.*, docs/admin.md "Models"):
 * each one a transaction with its audit entry in core. Entries and prices are JSON as the
 * catalog file writes them (in-app prices), checked by core. Each answers the model as it is now.
 */
const CreateModelInput = builder.inputType('CreateModelInput', {
  fields: (t) => ({
    model: t.field({ type: 'JSON', required: true, description: 'A catalog file entry: id, name, type, provider, pricing, settings, …' }),
    enabled: t.boolean({ description: 'false: created disabled, to set prices before opening it (default true).' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

const UpdateModelInput = builder.inputType('UpdateModelInput', {
  fields: (t) => ({
    id: t.id({ required: true }),
    changes: t.field({ type: 'JSON', required: true, description: 'Top-level fields of the entry to replace (null removes one); not id, type or pricing.' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

const SetModelPricesInput = builder.inputType('SetModelPricesInput', {
  fields: (t) => ({
    id: t.id({ required: true }),
    prices: t.field({ type: 'JSON', required: true, description: "The entry's `pricing` as the catalog file writes it (in-app prices)." }),
    effectiveFrom: t.field({ type: 'DateTime', description: 'When the prices start: now when absent; never in the past.' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

const CancelModelPricesInput = builder.inputType('CancelModelPricesInput', {
  fields: (t) => ({
    id: t.id({ required: true }),
    effectiveFrom: t.field({ type: 'DateTime', required: true, description: 'The start of a scheduled change that has not started yet.' }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

const ModelRefInput = builder.inputType('ModelRefInput', {
  fields: (t) => ({
    id: t.id({ required: true }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

/** JSON arrives as any value: core's schema refuses what is not an object (BAD_USER_INPUT). */
const entry = (v: unknown) => v as Record<string, unknown>;

builder.mutationFields((t) => ({
  createModel: t.field({
    type: Model,
    description: 'Adds a model to the catalog.',
    args: { input: t.arg({ type: CreateModelInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.models.create({ model: entry(input.model), ...present({ enabled: input.enabled, reason: input.reason }) })).id,
  }),
  updateModel: t.field({
    type: Model,
    description: "Replaces top-level fields of a model's entry (prices change with setModelPrices).",
    args: { input: t.arg({ type: UpdateModelInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.models.update({ id: input.id, changes: entry(input.changes), ...present({ reason: input.reason }) })).id,
  }),
  setModelPrices: t.field({
    type: Model,
    description: "Schedules a model's prices from a time (now when absent).",
    args: { input: t.arg({ type: SetModelPricesInput, required: true }) },
    resolve: async (_root, { input }, ctx) =>
      (await ctx.core.admin.models.setPrices({ id: input.id, prices: entry(input.prices), ...present({ effective_from: input.effectiveFrom, reason: input.reason }) })).id,
  }),
  cancelModelPrices: t.field({
    type: Model,
    description: 'Cancels a scheduled price change that has not started yet.',
    args: { input: t.arg({ type: CancelModelPricesInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.models.cancelPrices({ id: input.id, effective_from: input.effectiveFrom, ...present({ reason: input.reason }) })).id,
  }),
  enableModel: t.field({
    type: Model,
    args: { input: t.arg({ type: ModelRefInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.models.enable({ id: input.id, ...present({ reason: input.reason }) })).id,
  }),
  disableModel: t.field({
    type: Model,
    description: 'Refuses the model for new chats and jobs, as an unknown model is; running jobs finish.',
    args: { input: t.arg({ type: ModelRefInput, required: true }) },
    resolve: async (_root, { input }, ctx) => (await ctx.core.admin.models.disable({ id: input.id, ...present({ reason: input.reason }) })).id,
  }),
}));
