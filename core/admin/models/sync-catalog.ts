import type { EntityManager } from '@mikro-orm/postgresql';
import { syncModels, validateCatalog } from '../../catalog/catalog.ts';
import { recordAudit, type Operator } from '../audit.ts';
import { createdBy, type ModelDeps } from './model-row.ts';

/**
 * The operator's `catalog sync`: makes the models table match a catalog file (parsed, not yet
 * validated), in one transaction with its audit entry (`catalog.sync`: the definitions it
 * replaced or removed, and those it wrote). Models keep whether they are enabled and their
 * scheduled prices (core/catalog/catalog.ts syncModels says how a changed file price applies).
 */
export async function syncCatalog(deps: ModelDeps, em: EntityManager, raw: unknown, operator: Operator, requestId?: string) {
  const catalog = validateCatalog(raw, deps.config.apiPricePercent);
  const result = await syncModels(em, catalog, {
    at: deps.clock(),
    createdBy: createdBy(operator),
    audit: (tx, { before, after, result: { added, updated, removed, repriced } }) =>
      recordAudit(tx, operator, { action: 'catalog.sync', targetType: 'catalog', targetId: 'models', before: { models: before }, after: { models: after, added, updated, removed, repriced } }, requestId),
  });
  deps.catalog.invalidate();
  return result;
}
