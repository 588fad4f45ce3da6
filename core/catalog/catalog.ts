import { isDeepStrictEqual } from 'node:util';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import { CoreError, notFound } from '../errors.ts';
import { inexactApiPrice } from './pricing.ts';
import { catalogFileSchema, modelSchema, type CatalogFile, type MediaModel, type ModelDefinition, type ModelType, type TextModel } from './schema.ts';

/**
 * The catalog file is validated here, then its models are stored as written (in-app prices)
 * in the `models` table. Start-up adds the missing ones; `mas catalog sync` makes the table
 * match the file exactly.
 */
export interface ValidatedCatalog {
  parsed: CatalogFile;
  /** Each model entry as written in the file, keyed by id: what the database stores. */
  raw: Map<string, unknown>;
}

/** A catalog file that cannot be used; its message is one line naming the entry. */
export class CatalogError extends CoreError {
  constructor(message: string) {
    super('invalid_request', message, { param: 'catalog', reason: 'invalid_catalog' });
  }
}

export function validateCatalog(raw: unknown, apiPricePercent: bigint): ValidatedCatalog {
  const result = catalogFileSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new CatalogError(`catalog: ${issue.path.join('.')}: ${issue.message}`);
  }
  const parsed = result.data;
  parsed.models.forEach((m, i) => {
    const prices = m.type === 'text' ? [m.pricing.input_per_million, m.pricing.output_per_million] : [m.pricing.base, ...Object.values(m.pricing.per_unit)];
    for (const price of prices) {
      const problem = inexactApiPrice(price, apiPricePercent);
      if (problem) throw new CatalogError(`catalog: models.${i}.pricing (${m.id}): ${problem}`);
    }
  });
  const rawModels = (raw as { models?: unknown[] }).models ?? [];
  return { parsed, raw: new Map(parsed.models.map((m, i) => [m.id, rawModels[i]])) };
}

/** Adds the file's models that the database lacks; models already there keep their edits. */
export async function seedModels(em: EntityManager, catalog: ValidatedCatalog): Promise<string[]> {
  const added: string[] = [];
  for (const m of catalog.parsed.models) {
    const rows = await em.execute<{ id: string }[]>(
      'insert into models (id, type, definition) values (?, ?, ?::jsonb) on conflict (id) do nothing returning id',
      [m.id, m.type, JSON.stringify(catalog.raw.get(m.id))],
    );
    if (rows.length > 0) added.push(m.id);
  }
  return added;
}

/** Makes the database match the file: adds, overwrites and removes models. */
export async function syncModels(em: EntityManager, catalog: ValidatedCatalog) {
  return em.transactional(async (tx) => {
    const before = new Map((await tx.execute<{ id: string; definition: unknown }[]>('select id, definition from models for update')).map((r) => [r.id, r.definition]));
    const result = { object: 'catalog_sync' as const, added: [] as string[], updated: [] as string[], removed: [] as string[], unchanged: 0 };
    for (const m of catalog.parsed.models) {
      const definition = JSON.stringify(catalog.raw.get(m.id));
      const previous = before.get(m.id);
      before.delete(m.id);
      if (previous === undefined) result.added.push(m.id);
      // jsonb keeps its own key order: compare values, not text.
      else if (isDeepStrictEqual(previous, JSON.parse(definition))) {
        result.unchanged++;
        continue;
      } else result.updated.push(m.id);
      await tx.execute(
        `insert into models (id, type, definition) values (?, ?, ?::jsonb)
         on conflict (id) do update set type = excluded.type, definition = excluded.definition, updated_at = now()`,
        [m.id, m.type, definition],
      );
    }
    for (const id of before.keys()) {
      await tx.execute('delete from models where id = ?', [id]);
      result.removed.push(id);
    }
    return result;
  });
}

/**
 * Reads models from the database, keeping them for a few seconds: a chat request should not
 * pay a catalog query, and an edit shows on every instance within `ttlMs`.
 */
export class ModelCatalog {
  private cache: { at: number; models: Map<string, ModelDefinition> } | undefined;
  private loading: Promise<Map<string, ModelDefinition>> | undefined;
  private readonly ttlMs: number;
  private readonly logger: Logger;

  constructor(logger: Logger, ttlMs = 5000) {
    this.logger = logger;
    this.ttlMs = ttlMs;
  }

  async all(em: EntityManager): Promise<Map<string, ModelDefinition>> {
    if (this.cache && Date.now() - this.cache.at < this.ttlMs) return this.cache.models;
    this.loading ??= this.load(em).finally(() => (this.loading = undefined));
    return this.loading;
  }

  async get(em: EntityManager, id: string): Promise<ModelDefinition> {
    const model = (await this.all(em)).get(id);
    if (!model) throw notFound('model_not_found', `The model '${id}' does not exist.`, 'model');
    return model;
  }

  async list(em: EntityManager, type?: ModelType): Promise<ModelDefinition[]> {
    const models = [...(await this.all(em)).values()];
    return type ? models.filter((m) => m.type === type) : models;
  }

  invalidate(): void {
    this.cache = undefined;
  }

  private async load(em: EntityManager): Promise<Map<string, ModelDefinition>> {
    const rows = await em.execute<{ id: string; definition: unknown }[]>('select id, definition from models order by id');
    const models = new Map<string, ModelDefinition>();
    for (const row of rows) {
      const parsed = modelSchema.safeParse(row.definition);
      // An entry edited into an invalid state is left out rather than breaking every request.
      if (parsed.success) models.set(row.id, parsed.data);
      else this.logger.error({ model: row.id, issue: parsed.error.issues[0] }, 'invalid model definition in the database: left out');
    }
    this.cache = { at: Date.now(), models };
    return models;
  }
}

export const modelTypeFilter = z.object({ type: z.enum(['text', 'image', 'video', 'audio', '3d']).optional() });
export const modelIdInput = z.object({ id: z.string().min(1).max(200) });

export function requireTextModel(model: ModelDefinition): asserts model is TextModel {
  if (model.type !== 'text') {
    throw new CoreError('invalid_request', `The model '${model.id}' is a ${model.type} model: it makes media generations, not chat completions.`, { param: 'model', reason: 'wrong_endpoint', params: { model_type: model.type } });
  }
}

export function requireMediaModel(model: ModelDefinition): asserts model is MediaModel {
  if (model.type === 'text') {
    throw new CoreError('invalid_request', `The model '${model.id}' is a text model: it answers chat completions, not media generations.`, { param: 'model', reason: 'wrong_endpoint', params: { model_type: 'text' } });
  }
}

/** The operator's `catalog sync`: makes the models table match a catalog file (parsed, not yet validated). */
export async function syncCatalog(deps: { catalog: ModelCatalog; config: { apiPricePercent: bigint } }, em: EntityManager, raw: unknown) {
  const result = await syncModels(em, validateCatalog(raw, deps.config.apiPricePercent));
  deps.catalog.invalidate();
  return result;
}
