import { isDeepStrictEqual } from 'node:util';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import { CoreError, notFound } from '../errors.ts';
import { inexactPrice, liveSchedules, modelAt, scheduleProblem, withPrices, type PricedModel, type ScheduleRow } from './price-schedule.ts';
import { catalogFileSchema, jobTimeProblem, modelSchema, type CatalogFile, type MediaModel, type ModelDefinition, type ModelType, type SupportedParameter, type TextModel } from './schema.ts';

/**
 * The catalog file is validated here, then its models are stored as written (in-app prices)
 * in the `models` table. Start-up adds the missing ones and touches nothing else, so what
 * operators changed at run time (admin.models: edits, prices from a date, disabled models)
 * survives a restart; `mas catalog sync` makes the table match the file, audited.
 */
export interface ValidatedCatalog {
  parsed: CatalogFile;
  /** Each model entry as written in the file, keyed by id: what the database stores. */
  raw: Map<string, unknown>;
  /** The API price percentage its prices were checked against. */
  apiPricePercent: bigint;
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
    const problem = inexactPrice(m, apiPricePercent);
    if (problem) throw new CatalogError(`catalog: models.${i}.${problem.path.join('.')} (${m.id}): ${problem.message}`);
    const late = jobTimeProblem(m);
    if (late) throw new CatalogError(`catalog: models.${i}.${late.path.join('.')}: ${late.message}`);
  });
  const rawModels = (raw as { models?: unknown[] }).models ?? [];
  return { parsed, raw: new Map(parsed.models.map((m, i) => [m.id, rawModels[i]])), apiPricePercent };
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

export interface CatalogSyncResult {
  object: 'catalog_sync';
  added: string[];
  updated: string[];
  removed: string[];
  /** Updated models whose prices the file changed while a scheduled price was in force: the file's prices start at the sync. */
  repriced: string[];
  unchanged: number;
}

/** What a sync changed, for its audit entry: the definitions it replaced or removed, and those it wrote. */
export interface CatalogSyncChange {
  result: CatalogSyncResult;
  before: Record<string, unknown>;
  after: Record<string, unknown>;
}

/**
 * Makes the database match the file: adds, overwrites and removes models (a removed model's
 * scheduled prices go with it). What the file does not hold stays: whether a model is enabled,
 * and its scheduled prices. A scheduled price in force would hide a change of the file's
 * prices, so when the file changes the prices of such a model they become a scheduled price
 * from `at`; scheduled prices in force or to come must still fit the model as the file now
 * defines it, or the sync is refused. `audit` runs in the sync's transaction.
 */
export async function syncModels(
  em: EntityManager,
  catalog: ValidatedCatalog,
  opts: { at?: Date; createdBy?: string; audit?: (tx: EntityManager, change: CatalogSyncChange) => Promise<void> } = {},
): Promise<CatalogSyncResult> {
  const at = opts.at ?? new Date();
  return em.transactional(async (tx) => {
    const before = new Map((await tx.execute<{ id: string; definition: unknown }[]>('select id, definition from models for update')).map((r) => [r.id, r.definition]));
    const schedules = await liveSchedules(tx, at);
    const result: CatalogSyncResult = { object: 'catalog_sync', added: [], updated: [], removed: [], repriced: [], unchanged: 0 };
    const change: CatalogSyncChange = { result, before: {}, after: {} };
    for (const [i, m] of catalog.parsed.models.entries()) {
      const raw = catalog.raw.get(m.id) as Record<string, unknown>;
      const definition = JSON.stringify(raw);
      const previous = before.get(m.id) as Record<string, unknown> | undefined;
      before.delete(m.id);
      if (previous === undefined) result.added.push(m.id);
      // jsonb keeps its own key order: compare values, not text.
      else if (isDeepStrictEqual(previous, JSON.parse(definition))) {
        result.unchanged++;
        continue;
      } else {
        result.updated.push(m.id);
        change.before[m.id] = previous;
        const rows = schedules.get(m.id) ?? [];
        const repriced = rows.some((r) => r.effective_from <= at) && !isDeepStrictEqual(previous.pricing, JSON.parse(JSON.stringify(raw.pricing)));
        const problem = scheduleProblem(raw, repriced ? rows.filter((r) => r.effective_from > at) : rows, catalog.apiPricePercent);
        if (problem) {
          throw new CatalogError(
            `catalog: models.${i} (${m.id}): the price scheduled from ${problem.from.toISOString()} would no longer fit it: ${problem.path.join('.')}: ${problem.message}`,
          );
        }
        if (repriced) {
          result.repriced.push(m.id);
          await tx.execute(
            `insert into model_prices (model_id, effective_from, prices, created_by) values (?, ?, ?::jsonb, ?)
             on conflict (model_id, effective_from) do update set prices = excluded.prices`,
            [m.id, at, JSON.stringify(raw.pricing), opts.createdBy ?? 'internal'],
          );
        }
      }
      change.after[m.id] = raw;
      await tx.execute(
        `insert into models (id, type, definition) values (?, ?, ?::jsonb)
         on conflict (id) do update set type = excluded.type, definition = excluded.definition, updated_at = now()`,
        [m.id, m.type, definition],
      );
    }
    for (const [id, definition] of before) {
      await tx.execute('delete from models where id = ?', [id]);
      result.removed.push(id);
      change.before[id] = definition;
    }
    await opts.audit?.(tx, change);
    return result;
  });
}

/** A model as the catalog cache holds it: its base prices, its scheduled ones, and whether it is disabled. */
export interface CatalogEntry extends PricedModel {
  disabledAt: Date | null;
}

/**
 * Reads models from the database, keeping them for a few seconds: a chat request should not
 * pay a catalog query, and an edit shows on every instance within `ttlMs` (at once on the
 * instance that made it). Each model's scheduled prices are kept with it and picked at call
 * time, so a price changes at its date whatever the cache's age.
 */
export class ModelCatalog {
  private cache: { at: number; entries: Map<string, CatalogEntry> } | undefined;
  private loading: Promise<Map<string, CatalogEntry>> | undefined;
  /** Bumped by `invalidate`: a load that started before a change does not fill the cache. */
  private generation = 0;
  private readonly ttlMs: number;
  private readonly logger: Logger;

  constructor(logger: Logger, ttlMs = 5000) {
    this.logger = logger;
    this.ttlMs = ttlMs;
  }

  /** Every model, disabled ones too, with its schedule. */
  async entries(em: EntityManager): Promise<Map<string, CatalogEntry>> {
    if (this.cache && Date.now() - this.cache.at < this.ttlMs) return this.cache.entries;
    if (!this.loading) {
      const loading: Promise<Map<string, CatalogEntry>> = this.load(em).finally(() => {
        if (this.loading === loading) this.loading = undefined;
      });
      this.loading = loading;
    }
    return this.loading;
  }

  /**
   * A model open to new requests, priced as at `at` (the request's time). A disabled model is as
   * unknown as a missing one; the steps of a job already accepted pass `includeDisabled`.
   */
  async get(em: EntityManager, id: string, opts: { at?: Date; includeDisabled?: boolean } = {}): Promise<ModelDefinition> {
    const entry = (await this.entries(em)).get(id);
    if (!entry || (entry.disabledAt && !opts.includeDisabled)) throw notFound('model_not_found', `The model '${id}' does not exist.`, 'model');
    return modelAt(entry, opts.at ?? new Date());
  }

  /** The models open to new requests, priced as at `at`. */
  async list(em: EntityManager, type?: ModelType, at = new Date()): Promise<ModelDefinition[]> {
    const models: ModelDefinition[] = [];
    for (const entry of (await this.entries(em)).values()) {
      if (!entry.disabledAt && (!type || entry.model.type === type)) models.push(modelAt(entry, at));
    }
    return models;
  }

  invalidate(): void {
    this.generation++;
    this.cache = undefined;
    this.loading = undefined;
  }

  private async load(em: EntityManager): Promise<Map<string, CatalogEntry>> {
    const generation = this.generation;
    const rows = await em.execute<{ id: string; definition: unknown; disabled_at: Date | string | null }[]>('select id, definition, disabled_at from models order by id');
    const schedules = await liveSchedules(em, 'now');
    const entries = new Map<string, CatalogEntry>();
    for (const row of rows) {
      const entry = this.parseEntry(row.id, row.definition, schedules.get(row.id) ?? []);
      if (entry) entries.set(row.id, { ...entry, disabledAt: row.disabled_at === null ? null : new Date(row.disabled_at) });
    }
    if (generation === this.generation) this.cache = { at: Date.now(), entries };
    return entries;
  }

  /** An entry edited into an invalid state, or with a scheduled price that does not fit it, is left out rather than breaking every request or charging a price nobody checked. */
  private parseEntry(id: string, definition: unknown, rows: ScheduleRow[]): PricedModel | undefined {
    const parsed = modelSchema.safeParse(definition);
    if (!parsed.success) {
      this.logger.error({ model: id, issue: parsed.error.issues[0] }, 'invalid model definition in the database: left out');
      return undefined;
    }
    const schedule: PricedModel['schedule'] = [];
    for (const row of rows) {
      const priced = modelSchema.safeParse(withPrices(definition, row.prices));
      if (!priced.success) {
        this.logger.error({ model: id, effective_from: row.effective_from, issue: priced.error.issues[0] }, 'invalid scheduled price in the database: model left out');
        return undefined;
      }
      schedule.push({ from: row.effective_from, model: priced.data });
    }
    return { model: parsed.data, schedule };
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

/**
 * Refuses a request that uses a parameter the model does not support (its catalog entry's
 * `supported_parameters`), naming the parameter and the model: checked before anything is
 * reserved or sent upstream.
 */
export function requireSupportedParameters(model: TextModel, used: readonly SupportedParameter[], opts: { maxTokensParam?: string } = {}): void {
  const missing = used.find((p) => !model.supported_parameters.includes(p));
  if (missing === undefined) return;
  // The field the request used: max_completion_tokens is the catalog's max_tokens.
  const param = missing === 'structured_outputs' ? 'response_format' : missing === 'max_tokens' ? (opts.maxTokensParam ?? missing) : missing;
  const what = missing === 'structured_outputs' ? "structured outputs ('response_format' of type json_schema)" : `'${missing}'`;
  throw new CoreError('invalid_request', `The model '${model.id}' does not support ${what}. Its supported parameters: ${model.supported_parameters.join(', ')}.`, {
    param,
    reason: 'unsupported_parameter',
  });
}
