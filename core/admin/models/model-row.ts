import type { EntityManager } from '@mikro-orm/postgresql';
import type { ModelCatalog } from '../../catalog/catalog.ts';
import { modelSchema, type ModelType } from '../../catalog/schema.ts';
import { modelView } from '../../catalog/views.ts';
import { notFound } from '../../errors.ts';
import type { Clock } from '../../ports.ts';
import { actorOf, type Operator } from '../audit.ts';
import type { AdminModelFilter, AdminModelView } from './schema.ts';

/** What the model use cases need: the catalog (to invalidate), the API price percentage, the clock. */
export type ModelDeps = { catalog: ModelCatalog; config: { apiPricePercent: bigint }; clock: Clock };

export interface ModelRow {
  id: string;
  type: ModelType;
  definition: Record<string, unknown>;
  disabled_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface PriceRow {
  model_id: string;
  effective_from: Date;
  prices: Record<string, unknown>;
  created_at: Date;
  created_by: string;
}

type Raw<T> = { [K in keyof T]: T[K] extends Date ? Date | string : T[K] extends Date | null ? Date | string | null : T[K] };
const date = (v: Date | string) => new Date(v);

/** The model's row, locked for the change about to be made; an unknown id is model_not_found. */
export async function lockModel(tx: EntityManager, id: string): Promise<ModelRow> {
  const [row] = await tx.execute<Raw<ModelRow>[]>('select id, type, definition, disabled_at, created_at, updated_at from models where id = ? for update', [id]);
  if (!row) throw notFound('model_not_found', `The model '${id}' does not exist.`, 'model');
  return toModelRow(row);
}

function toModelRow(row: Raw<ModelRow>): ModelRow {
  return { ...row, disabled_at: row.disabled_at === null ? null : date(row.disabled_at), created_at: date(row.created_at), updated_at: date(row.updated_at) };
}

/** Who scheduled a price, as `model_prices.created_by` holds it. */
export function createdBy(operator: Operator): string {
  const actor = actorOf(operator);
  return actor.id === null ? actor.type : `${actor.type}:${actor.id}`;
}

/** The scheduled price in force at `at` (the latest row at or before it), or undefined: the base price then. */
export function inForce(rows: PriceRow[], at: Date): PriceRow | undefined {
  return rows.filter((r) => r.effective_from.getTime() <= at.getTime()).at(-1);
}

/** A model's scheduled prices, oldest first, history included. */
export async function priceRows(em: EntityManager, id: string): Promise<PriceRow[]> {
  const rows = await em.execute<Raw<PriceRow>[]>('select model_id, effective_from, prices, created_at, created_by from model_prices where model_id = ? order by effective_from', [id]);
  return rows.map((p) => ({ ...p, effective_from: date(p.effective_from), created_at: date(p.created_at) }));
}

/** Models with their whole price history, for operators (not the hot path: read from the tables). */
export async function readAdminModels(deps: ModelDeps, em: EntityManager, filter: AdminModelFilter & { id?: string } = {}): Promise<AdminModelView[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (sql: string, value: unknown) => {
    where.push(sql);
    params.push(value);
  };
  if (filter.id !== undefined) add('id = ?', filter.id);
  if (filter.type !== undefined) add('type = ?', filter.type);
  if (filter.enabled !== undefined) where.push(filter.enabled ? 'disabled_at is null' : 'disabled_at is not null');
  const clause = where.length ? `where ${where.join(' and ')}` : '';
  const models = (await em.execute<Raw<ModelRow>[]>(`select id, type, definition, disabled_at, created_at, updated_at from models ${clause} order by id`, params)).map(toModelRow);
  const prices = await em.execute<Raw<PriceRow>[]>(
    `select model_id, effective_from, prices, created_at, created_by from model_prices where model_id in (select id from models ${clause}) order by model_id, effective_from`,
    params,
  );
  const byModel = new Map<string, PriceRow[]>();
  for (const p of prices) {
    const list = byModel.get(p.model_id) ?? [];
    list.push({ ...p, effective_from: date(p.effective_from), created_at: date(p.created_at) });
    byModel.set(p.model_id, list);
  }
  const now = deps.clock();
  return models.map((m) => adminModelView(m, byModel.get(m.id) ?? [], now, deps.config.apiPricePercent));
}

export async function readAdminModel(deps: ModelDeps, em: EntityManager, id: string): Promise<AdminModelView> {
  const [model] = await readAdminModels(deps, em, { id });
  if (!model) throw notFound('model_not_found', `The model '${id}' does not exist.`, 'model');
  return model;
}

export function adminModelView(m: ModelRow, prices: PriceRow[], now: Date, apiPricePercent: bigint): AdminModelView {
  const current = inForce(prices, now);
  const pricing = (current?.prices ?? m.definition.pricing ?? {}) as Record<string, unknown>;
  const parsed = modelSchema.safeParse({ ...m.definition, pricing });
  return {
    id: m.id,
    object: 'admin_model',
    type: m.type,
    enabled: m.disabled_at === null,
    disabled_at: m.disabled_at?.toISOString() ?? null,
    definition: m.definition,
    prices_in_force: { effective_from: current?.effective_from.toISOString() ?? null, pricing },
    price_schedule: prices.map((p) => ({ effective_from: p.effective_from.toISOString(), pricing: p.prices, created_at: p.created_at.toISOString(), created_by: p.created_by })),
    api: parsed.success ? modelView(parsed.data, apiPricePercent) : null,
    created_at: m.created_at.toISOString(),
    updated_at: m.updated_at.toISOString(),
  };
}
