import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { MODEL_TYPES } from '../../catalog/schema.ts';
import { invalid } from '../../errors.ts';
import { readAdminModels, type ModelDeps } from '../models/model-row.ts';
import { pageInput, pageOf } from './paging.ts';

const modelId = z.string().trim().min(1).max(200);

export const modelListInput = pageInput.extend({
  type: z.enum(MODEL_TYPES).optional(),
  enabled: z.boolean().optional(),
  /** The id of the last model of the previous page: models come in id order. */
  after: modelId.optional(),
});

export const modelIdsInput = z.object({ ids: z.array(modelId).max(500) });

/**
 * Models as operators see them (core/admin/models: the stored entry, the price in force, the
 * price schedule, the API's view). A catalog holds tens of models, not thousands: the whole
 * catalog is read (two queries) and paged here, so that the view has one source.
 */
export async function listAdminModels(deps: ModelDeps, em: EntityManager, input: z.output<typeof modelListInput>) {
  const all = await readAdminModels(deps, em, { ...(input.type ? { type: input.type } : {}), ...(input.enabled !== undefined ? { enabled: input.enabled } : {}) });
  const start = input.after === undefined ? 0 : all.findIndex((m) => m.id === input.after) + 1;
  if (start === 0 && input.after !== undefined) throw invalid('after', `'after' must be the id of a model of this list; ${input.after} is not.`, 'invalid_cursor');
  return pageOf(all.slice(start, start + input.first + 1), input.first);
}

/** The models with these ids (a dataloader's batch); unknown ids are left out. */
export async function modelsByIds(deps: ModelDeps, em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const wanted = new Set(ids);
  return { object: 'list' as const, data: (await readAdminModels(deps, em)).filter((m) => wanted.has(m.id)) };
}
