import type { EntityManager } from '@mikro-orm/postgresql';
import { inexactApiPrice } from './pricing.ts';
import { modelSchema, type ModelDefinition } from './schema.ts';

/**
 * Prices from a date (the `model_prices` table, docs/admin.md "Models"). The price of a model in
 * force at time T is its scheduled row with the latest `effective_from` <= T, else the model's
 * own `pricing` (its base price: the catalog file's, or what `admin.models.create` wrote).
 * A row holds a `pricing` as the catalog file writes it; the model it prices is the stored
 * definition with that `pricing` in place, checked as a catalog entry is.
 */
export interface ScheduleRow {
  model_id: string;
  effective_from: Date;
  prices: unknown;
}

/** A model with every price it has from now on: what the catalog cache holds per model. */
export interface PricedModel {
  /** The model with its base prices. */
  model: ModelDefinition;
  /** Each scheduled price still in force or to come, oldest first, as the whole model priced from then. */
  schedule: { from: Date; model: ModelDefinition }[];
}

/** The model as priced at `at`: the cache keeps the schedule, so the price changes on time without a reload. */
export function modelAt(priced: PricedModel, at: Date): ModelDefinition {
  for (let i = priced.schedule.length - 1; i >= 0; i--) {
    if (priced.schedule[i]!.from.getTime() <= at.getTime()) return priced.schedule[i]!.model;
  }
  return priced.model;
}

/**
 * The scheduled rows that still matter at `at` (all models, or one): the row in force then and
 * every later one. Older rows are history, no longer priced by, and may not even fit the model
 * since its settings changed.
 */
export async function liveSchedules(em: EntityManager, at: Date | 'now', modelId?: string): Promise<Map<string, ScheduleRow[]>> {
  const atSql = at === 'now' ? 'now()' : '?::timestamptz';
  const params: unknown[] = at === 'now' ? [] : [at, at];
  const rows = await em.execute<{ model_id: string; effective_from: Date | string; prices: unknown }[]>(
    `select p.model_id, p.effective_from, p.prices from model_prices p
     where (p.effective_from > ${atSql}
        or p.effective_from = (select max(q.effective_from) from model_prices q where q.model_id = p.model_id and q.effective_from <= ${atSql}))
        ${modelId === undefined ? '' : 'and p.model_id = ?'}
     order by p.model_id, p.effective_from`,
    modelId === undefined ? params : [...params, modelId],
  );
  const byModel = new Map<string, ScheduleRow[]>();
  for (const row of rows) {
    const list = byModel.get(row.model_id) ?? [];
    list.push({ model_id: row.model_id, effective_from: new Date(row.effective_from), prices: row.prices });
    byModel.set(row.model_id, list);
  }
  return byModel;
}

/** A problem with one model entry: where (a path within the entry) and what. */
export interface EntryProblem {
  path: PropertyKey[];
  message: string;
}

/** The entry with other prices in place of its own: what a scheduled row prices. */
export function withPrices(definition: unknown, prices: unknown): Record<string, unknown> {
  return { ...(definition as Record<string, unknown>), pricing: prices };
}

/** Why an entry is not a valid model, checked as a catalog file entry is (the schema, then exact API prices). */
export function entryProblem(definition: unknown, apiPricePercent: bigint): EntryProblem | undefined {
  const parsed = modelSchema.safeParse(definition);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return { path: issue.path, message: issue.message };
  }
  return inexactPrice(parsed.data, apiPricePercent);
}

/** A price whose API price (`apiPricePercent` of it) is not a whole micro-coin: the catalog refuses those. */
export function inexactPrice(m: ModelDefinition, apiPricePercent: bigint): EntryProblem | undefined {
  const prices: [PropertyKey[], bigint][] =
    m.type === 'text'
      ? [
          [['pricing', 'input_per_million'], m.pricing.input_per_million],
          [['pricing', 'output_per_million'], m.pricing.output_per_million],
        ]
      : [[['pricing', 'base'], m.pricing.base], ...Object.entries(m.pricing.per_unit).map(([k, v]): [PropertyKey[], bigint] => [['pricing', 'per_unit', k], v])];
  for (const [path, price] of prices) {
    const message = inexactApiPrice(price, apiPricePercent);
    if (message) return { path, message };
  }
  return undefined;
}

/**
 * The first scheduled row that would no longer fit this definition (a changed setting a price
 * refers to, another type), with its date: rows in force or to come must keep pricing the model.
 */
export function scheduleProblem(definition: unknown, rows: ScheduleRow[], apiPricePercent: bigint): (EntryProblem & { from: Date }) | undefined {
  for (const row of rows) {
    const problem = entryProblem(withPrices(definition, row.prices), apiPricePercent);
    if (problem) return { ...problem, from: row.effective_from };
  }
  return undefined;
}
