import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { asOfSchema, checkRange, daySchema, idFilter, MEASURE_SUMS, measures, measuresSchema, rangeShape, readAsOf, type MeasureRow } from './days.ts';

/**
 * The N accounts, or the N models, that spent most over a range (spend as in refresh.ts:
 * captured, refunds apart; adjustments, which are about no model, are in no model's row). Each reads the per-account or per-model rollup, or the full grain
 * through its account or model index when filtered by the other.
 */
const limit = z.number().int().min(1).max(100).default(10);

export const topAccountsInput = z.object({ ...rangeShape, limit, model_id: idFilter.optional().describe('only what was spent on this model') }).superRefine(checkRange);
export const topModelsInput = z.object({ ...rangeShape, limit, account_id: idFilter.optional().describe('only what this account spent') }).superRefine(checkRange);

const topAccountSchema = z.object({ account_id: z.string(), email: z.string().nullable(), ...measuresSchema }).strict();
const topModelSchema = z.object({ model_id: z.string(), ...measuresSchema }).strict();
const top = <T extends z.ZodType>(object: 'top_accounts' | 'top_models', row: T) =>
  z
    .object({ object: z.literal(object), from: daySchema, to: daySchema, data: z.array(row).describe('by spend, largest first'), as_of: asOfSchema })
    .strict();
export const topAccountsSchema = top('top_accounts', topAccountSchema);
export const topModelsSchema = top('top_models', topModelSchema);

export async function topAccounts(em: EntityManager, input: z.output<typeof topAccountsInput>): Promise<z.infer<typeof topAccountsSchema>> {
  const byModel = input.model_id !== undefined;
  const rows = await em.execute<(MeasureRow & { account_id: string; email: string | null })[]>(
    `select t.*, a.email from (
       select account_id, ${MEASURE_SUMS}, sum(spent_micro) as rank
       from ${byModel ? 'usage_daily' : 'usage_daily_accounts'}
       where day >= ?::date and day <= ?::date${byModel ? ' and model_id = ?' : ''}
       group by account_id order by sum(spent_micro) desc, account_id limit ?
     ) t left join accounts a on a.id = t.account_id
     order by t.rank desc, t.account_id`,
    [input.from, input.to, ...(byModel ? [input.model_id] : []), input.limit],
  );
  return {
    object: 'top_accounts',
    from: input.from,
    to: input.to,
    data: rows.map((r) => ({ account_id: r.account_id, email: r.email, ...measures(r) })),
    as_of: await readAsOf(em),
  };
}

export async function topModels(em: EntityManager, input: z.output<typeof topModelsInput>): Promise<z.infer<typeof topModelsSchema>> {
  const byAccount = input.account_id !== undefined;
  const rows = await em.execute<(MeasureRow & { model_id: string })[]>(
    `select model_id, ${MEASURE_SUMS}
     from ${byAccount ? 'usage_daily' : 'usage_daily_models'}
     where day >= ?::date and day <= ?::date and model_id <> ''${byAccount ? ' and account_id = ?' : ''}
     group by model_id order by sum(spent_micro) desc, model_id limit ?`,
    [input.from, input.to, ...(byAccount ? [input.account_id] : []), input.limit],
  );
  return {
    object: 'top_models',
    from: input.from,
    to: input.to,
    data: rows.map((r) => ({ model_id: r.model_id, ...measures(r) })),
    as_of: await readAsOf(em),
  };
}
