import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { asOfSchema, checkRange, daySchema, idFilter, MEASURE_SUMS, measures, measuresSchema, noneToNull, rangeShape, readAsOf, type MeasureRow } from './days.ts';

/**
 * Coins per day over a range, optionally for one account, model or key, and grouped by any of
 * them: spend, refunds, job releases and adjustments apart (definitions in refresh.ts). Reads
 * the smallest rollup that has the columns asked for: per model (totals, models), per account,
 * or the full grain (keys, or accounts with models). The grand total comes from the same scan.
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

type UsageRow = MeasureRow & { total: number; day: string | null; account_id?: string; model_id?: string; key_id?: string };

/** The rollup to read: the smallest that holds every column filtered or grouped on. */
function rollupFor(used: Set<Dimension>): string {
  if (used.has('key') || (used.has('account') && used.has('model'))) return 'usage_daily';
  if (used.has('account')) return 'usage_daily_accounts';
  return 'usage_daily_models';
}

export async function usagePerDay(em: EntityManager, input: z.output<typeof usageInput>): Promise<z.infer<typeof usageSchema>> {
  const groupBy = DIMENSIONS.filter((d) => input.group_by.includes(d));
  const filters = DIMENSIONS.flatMap((d) => {
    const value = input[COLUMN[d]];
    return value === undefined ? [] : [{ column: COLUMN[d], dimension: d, value }];
  });
  const table = rollupFor(new Set([...groupBy, ...filters.map((f) => f.dimension)]));
  const columns = groupBy.map((d) => COLUMN[d]);
  const rows = await em.execute<UsageRow[]>(
    `select grouping(day) as total, day::text as day${columns.map((c) => `, ${c}`).join('')}, ${MEASURE_SUMS}
     from ${table}
     where day >= ?::date and day <= ?::date${filters.map((f) => ` and ${f.column} = ?`).join('')}
     group by grouping sets ((day${columns.map((c) => `, ${c}`).join('')}), ())
     order by grouping(day) desc, day, sum(spent_micro) desc${columns.map((c) => `, ${c}`).join('')}
     limit ?`,
    [input.from, input.to, ...filters.map((f) => f.value), input.limit + 2],
  );
  const [totals, ...days] = rows;
  return {
    object: 'usage_per_day',
    from: input.from,
    to: input.to,
    group_by: groupBy,
    totals: measures(totals!),
    data: days.slice(0, input.limit).map((r) => ({
      day: r.day!,
      account_id: groupBy.includes('account') ? noneToNull(r.account_id) : null,
      model_id: groupBy.includes('model') ? noneToNull(r.model_id) : null,
      key_id: groupBy.includes('key') ? noneToNull(r.key_id) : null,
      ...measures(r),
    })),
    has_more: days.length > input.limit,
    as_of: await readAsOf(em),
  };
}
