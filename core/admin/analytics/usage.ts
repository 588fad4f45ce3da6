import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { asOfSchema, checkRange, daySchema, idFilter, MEASURE_COLUMNS, MEASURE_SUMS, measures, measuresSchema, noneToNull, rangeShape, readAsOf, type MeasureRow } from './days.ts';

/**
 * Coins per day over a range, optionally for one account, model or key, and grouped by any of
 * them: spend, refunds, job releases and adjustments apart (definitions in refresh.ts). Reads
 * the smallest rollup that has the columns asked for: per model (totals, models), per account,
 * or the full grain (keys, or accounts with models); the totals are one more sum over it.
 */
const DIMENSIONS = ['account', 'model', 'key'] as const;
type Dimension = (typeof DIMENSIONS)[number];
const COLUMN: Record<Dimension, 'account_id' | 'model_id' | 'key_id'> = { account: 'account_id', model: 'model_id', key: 'key_id' };

export const usageInput = z
  .object({
    ...rangeShape,
    account_id: idFilter.optional(),
    model_id: idFilter.optional(),
    key_id: idFilter.optional(),
    group_by: z.array(z.enum(DIMENSIONS)).max(3).default([]).describe('split each day by these, besides the day'),
    limit: z.number().int().min(1).max(10_000).default(1000).describe('rows at most; has_more says whether there were more'),
  })
  .superRefine(checkRange);

const usageRowSchema = z
  .object({
    day: daySchema,
    account_id: z.string().nullable().describe('with group_by account'),
    model_id: z.string().nullable().describe('with group_by model; null also for what is about no model (adjustments)'),
    key_id: z.string().nullable().describe('with group_by key; null also for what is about no key'),
    ...measuresSchema,
  })
  .strict();

export const usageSchema = z
  .object({
    object: z.literal('usage_per_day'),
    from: daySchema,
    to: daySchema,
    group_by: z.array(z.enum(DIMENSIONS)),
    totals: z.object(measuresSchema).strict().describe('over the whole range and filter, whatever the limit'),
    data: z.array(usageRowSchema).describe('by day, then by spend, largest first; days with nothing are absent'),
    has_more: z.boolean(),
    as_of: asOfSchema,
  })
  .strict();

type UsageRow = MeasureRow & { day: string; account_id?: string; model_id?: string; key_id?: string };

/**
 * The rollup to read, the smallest that holds every column filtered or grouped on, and its
 * grain: when the grouping is the grain, rows are read as stored (in day order from the
 * primary key, sorted by spend within each day, reading no further than the limit needs).
 */
function rollupFor(used: Set<Dimension>): { table: string; grain: Dimension[] } {
  if (used.has('key') || (used.has('account') && used.has('model'))) return { table: 'usage_daily', grain: ['account', 'model', 'key'] };
  if (used.has('account')) return { table: 'usage_daily_accounts', grain: ['account'] };
  return { table: 'usage_daily_models', grain: ['model'] };
}

export async function usagePerDay(em: EntityManager, input: z.output<typeof usageInput>): Promise<z.infer<typeof usageSchema>> {
  const groupBy = DIMENSIONS.filter((d) => input.group_by.includes(d));
  const filters = DIMENSIONS.flatMap((d) => {
    const value = input[COLUMN[d]];
    return value === undefined ? [] : [{ column: COLUMN[d], dimension: d, value }];
  });
  const { table, grain } = rollupFor(new Set([...groupBy, ...filters.map((f) => f.dimension)]));
  const columns = groupBy.map((d) => `, ${COLUMN[d]}`).join('');
  const where = `where day >= ?::date and day <= ?::date${filters.map((f) => ` and ${f.column} = ?`).join('')}`;
  const params = [input.from, input.to, ...filters.map((f) => f.value)];
  const stored = grain.length === groupBy.length;
  const days = await em.execute<UsageRow[]>(
    stored
      ? `select day::text as day${columns}, ${MEASURE_COLUMNS} from ${table} ${where} order by day, spent_micro desc${columns} limit ?`
      : `select day::text as day${columns}, ${MEASURE_SUMS} from ${table} ${where} group by day${columns} order by day, sum(spent_micro) desc${columns} limit ?`,
    [...params, input.limit + 1],
  );
  const [totals] = await em.execute<MeasureRow[]>(`select ${MEASURE_SUMS} from ${table} ${where}`, params);
  return {
    object: 'usage_per_day',
    from: input.from,
    to: input.to,
    group_by: groupBy,
    totals: measures(totals!),
    data: days.slice(0, input.limit).map((r) => ({
      day: r.day,
      account_id: groupBy.includes('account') ? noneToNull(r.account_id) : null,
      model_id: groupBy.includes('model') ? noneToNull(r.model_id) : null,
      key_id: groupBy.includes('key') ? noneToNull(r.key_id) : null,
      ...measures(r),
    })),
    has_more: days.length > input.limit,
    as_of: await readAsOf(em),
  };
}
