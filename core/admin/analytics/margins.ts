import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsToJson } from '../../money/coins.ts';
import { coinsSchema } from '../../views.ts';
import { asOfSchema, checkRange, daySchema, idFilter, rangeShape, readAsOf } from './days.ts';

/**
 * Revenue, upstream cost and margin over a range (docs/admin.md, "Margin"), from the route
 * rollup (definitions in route-days.ts): per day, model, provider and route, as grouped, with
 * totals. The margin is taken over the requests whose upstream cost is known only, and each
 * row says how many those are: "cost known for 8 of 10 requests" rather than a margin that
 * counts unknown costs as zero.
 */
const GROUPS = ['day', 'model', 'provider', 'route'] as const;
type Group = (typeof GROUPS)[number];

export const marginsInput = z
  .object({
    ...rangeShape,
    model_id: idFilter.optional(),
    provider: z.string().max(200).optional().describe("only this provider's routes; '' for requests from before routes were recorded"),
    route_model: z.string().max(200).optional().describe("only this model name at the provider; '' as for provider"),
    group_by: z.array(z.enum(GROUPS)).max(4).default(['day', 'model', 'route']).describe('split by these; route is the provider and its model name together'),
    limit: z.number().int().min(1).max(10_000).default(1000).describe('rows at most; has_more says whether there were more'),
  })
  .superRefine(checkRange);

const marginMeasures = {
  requests: z.number().int().describe('chat requests and succeeded jobs served'),
  revenue_coins: coinsSchema.describe('what they were charged'),
  costed_requests: z.number().int().describe('of them, those whose upstream cost is known'),
  costed_revenue_coins: coinsSchema.describe('what the costed requests were charged'),
  upstream_cost_coins: coinsSchema.describe('what the costed requests cost upstream'),
  margin_coins: coinsSchema.describe('costed revenue − upstream cost (over the costed requests only)'),
  margin_percent: z.string().nullable().describe('margin ÷ costed revenue × 100, one decimal, rounded half away from zero; null when the costed revenue is 0'),
  cost_known_percent: z.string().nullable().describe('costed requests ÷ requests × 100, one decimal; null when there is no request'),
};

const marginRowSchema = z
  .object({
    day: daySchema.nullable().describe('with group_by day'),
    model_id: z.string().nullable().describe('with group_by model'),
    provider: z.string().nullable().describe("with group_by provider or route; '' for requests served before routes were recorded (by the model's one provider then)"),
    route_model: z.string().nullable().describe("with group_by route: the model's name at the provider; '' as for provider"),
    ...marginMeasures,
  })
  .strict();

export const marginsSchema = z
  .object({
    object: z.literal('margins'),
    from: daySchema,
    to: daySchema,
    group_by: z.array(z.enum(GROUPS)),
    totals: z.object(marginMeasures).strict().describe('over the whole range and filter, whatever the limit'),
    data: z.array(marginRowSchema).describe('by day (when grouped by day), then by revenue, largest first; what served nothing is absent'),
    has_more: z.boolean(),
    as_of: asOfSchema,
  })
  .strict();

interface SumRow {
  requests: number | null;
  revenue: string | null;
  costed_requests: number | null;
  costed_revenue: string | null;
  upstream: string | null;
}

const SUMS = `sum(requests)::int as requests, sum(revenue_micro)::text as revenue, sum(costed_requests)::int as costed_requests,
  sum(costed_revenue_micro)::text as costed_revenue, sum(upstream_cost_micro)::text as upstream`;

/** part ÷ whole × 100 with one decimal, rounded half away from zero, in integers. */
export function percent(part: bigint, whole: bigint): string | null {
  if (whole <= 0n) return null;
  const negative = part < 0n;
  const abs = (negative ? -part : part) * 1000n;
  const tenths = abs / whole + ((abs % whole) * 2n >= whole ? 1n : 0n);
  return `${negative && tenths !== 0n ? '-' : ''}${tenths / 10n}.${tenths % 10n}`;
}

function measures(r: SumRow) {
  const revenue = BigInt(r.revenue ?? 0);
  const costedRevenue = BigInt(r.costed_revenue ?? 0);
  const upstream = BigInt(r.upstream ?? 0);
  const requests = Number(r.requests ?? 0);
  const costed = Number(r.costed_requests ?? 0);
  return {
    requests,
    revenue_coins: coinsToJson(revenue),
    costed_requests: costed,
    costed_revenue_coins: coinsToJson(costedRevenue),
    upstream_cost_coins: coinsToJson(upstream),
    margin_coins: coinsToJson(costedRevenue - upstream),
    margin_percent: percent(costedRevenue - upstream, costedRevenue),
    cost_known_percent: percent(BigInt(costed), BigInt(requests)),
  };
}

const COLUMNS: Record<Group, string[]> = { day: ['day'], model: ['model_id'], provider: ['provider'], route: ['provider', 'route_model'] };

export async function margins(em: EntityManager, input: z.output<typeof marginsInput>): Promise<z.infer<typeof marginsSchema>> {
  const groupBy = GROUPS.filter((g) => input.group_by.includes(g));
  const columns = [...new Set(groupBy.flatMap((g) => COLUMNS[g]))];
  const select = columns.map((c) => (c === 'day' ? 'day::text as day' : c)).join(', ');
  const filters = (['model_id', 'provider', 'route_model'] as const).filter((f) => input[f] !== undefined);
  const where = `where day >= ?::date and day <= ?::date${filters.map((f) => ` and ${f} = ?`).join('')}`;
  const params = [input.from, input.to, ...filters.map((f) => input[f]!)];
  const order = [...(columns.includes('day') ? ['day'] : []), 'sum(revenue_micro) desc', ...columns.filter((c) => c !== 'day')].join(', ');
  const rows = await em.execute<(SumRow & { day?: string; model_id?: string; provider?: string; route_model?: string })[]>(
    `select ${select ? `${select}, ` : ''}${SUMS} from route_daily ${where}${columns.length ? ` group by ${columns.join(', ')}` : ''} order by ${order} limit ?`,
    [...params, input.limit + 1],
  );
  const [totals] = await em.execute<SumRow[]>(`select ${SUMS} from route_daily ${where}`, params);
  // With no column grouped, the one row is the totals: an empty range has no row.
  const data = columns.length === 0 && Number(rows[0]?.requests ?? 0) === 0 ? [] : rows;
  return {
    object: 'margins',
    from: input.from,
    to: input.to,
    group_by: groupBy,
    totals: measures(totals!),
    data: data.slice(0, input.limit).map((r) => ({
      day: r.day ?? null,
      model_id: r.model_id ?? null,
      provider: r.provider ?? null,
      route_model: r.route_model ?? null,
      ...measures(r),
    })),
    has_more: data.length > input.limit,
    as_of: await readAsOf(em),
  };
}
