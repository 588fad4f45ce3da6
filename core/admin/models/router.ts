import { modelIdInput } from '../../catalog/catalog.ts';
import { adminProcedure, operatorProcedure, router } from '../../trpc.ts';
import { createModel } from './create-model.ts';
import { setModelEnabled } from './enable-model.ts';
import { readAdminModel, readAdminModels } from './model-row.ts';
import { adminModelFilter, cancelPricesInput, createModelInput, modelRefInput, setPricesInput, updateModelInput } from './schema.ts';
import { cancelPrices, setPrices } from './set-prices.ts';
import { updateModel } from './update-model.ts';

/**
 * Operators' changes to the model catalog at run time (docs/admin.md "Models"): create, update,
 * prices from a date, enable, disable; each one transaction with its audit entry. Reads show
 * disabled models and the whole price history, which the API's models.list does not.
 */
export const modelAdminRouter = router({
  list: adminProcedure.input(adminModelFilter).query(async ({ ctx, input }) => ({ object: 'list' as const, data: await readAdminModels(ctx.deps, ctx.em, input) })),
  get: adminProcedure.input(modelIdInput).query(({ ctx, input }) => readAdminModel(ctx.deps, ctx.em, input.id)),
  create: operatorProcedure.input(createModelInput).mutation(({ ctx, input }) => createModel(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input)),
  update: operatorProcedure.input(updateModelInput).mutation(({ ctx, input }) => updateModel(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input)),
  setPrices: operatorProcedure.input(setPricesInput).mutation(({ ctx, input }) => setPrices(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input)),
  cancelPrices: operatorProcedure.input(cancelPricesInput).mutation(({ ctx, input }) => cancelPrices(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input)),
  enable: operatorProcedure.input(modelRefInput).mutation(({ ctx, input }) => setModelEnabled(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input, true)),
  disable: operatorProcedure.input(modelRefInput).mutation(({ ctx, input }) => setModelEnabled(ctx.deps, { em: ctx.em, operator: ctx.principal, requestId: ctx.requestId }, input, false)),
});
