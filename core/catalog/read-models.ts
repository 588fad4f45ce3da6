import type { EntityManager } from '@mikro-orm/postgresql';
import type { ModelCatalog } from './catalog.ts';
import type { ModelType } from './schema.ts';
import { modelView } from './views.ts';

type Deps = { catalog: ModelCatalog; config: { apiPricePercent: bigint }; clock: () => Date };

/** The models available through the API (enabled ones), at the API prices in force now. */
export async function listModels(deps: Deps, em: EntityManager, type?: ModelType) {
  const models = await deps.catalog.list(em, type, deps.clock());
  return { object: 'list' as const, data: models.map((m) => modelView(m, deps.config.apiPricePercent)) };
}

/** One model, with a ready example request. */
export async function getModel(deps: Deps, em: EntityManager, id: string) {
  return modelView(await deps.catalog.get(em, id, { at: deps.clock() }), deps.config.apiPricePercent, { withExample: true });
}
