import type { EntityManager } from '@mikro-orm/postgresql';
import { CoreError } from '../../errors.ts';
import type { MediaProviderRegistry, ProviderRegistry } from '../../ports.ts';
import { recordAudit, type Operator } from '../audit.ts';
import { checkEntry, requireProvider } from './check.ts';
import { readAdminModel, type ModelDeps } from './model-row.ts';
import type { CreateModelInput } from './schema.ts';

export interface ModelCtx {
  em: EntityManager;
  operator: Operator;
  requestId: string | undefined;
}

/**
 * A new model, as a catalog file entry would add it: the same checks, its `pricing` the base
 * price. It stays when the service starts again (start-up only adds the file's missing models);
 * `catalog sync` removes it unless the file has it too.
 */
export async function createModel(deps: ModelDeps & { providers: ProviderRegistry; media: MediaProviderRegistry }, c: ModelCtx, input: CreateModelInput) {
  const model = checkEntry(input.model, 'model', deps.config.apiPricePercent);
  requireProvider(deps, model, 'model', input.model);
  const created = await c.em.transactional(async (tx) => {
    const rows = await tx.execute<{ id: string }[]>(
      'insert into models (id, type, definition, disabled_at) values (?, ?, ?::jsonb, ?) on conflict (id) do nothing returning id',
      [model.id, model.type, JSON.stringify(input.model), input.enabled ? null : deps.clock()],
    );
    if (rows.length === 0) {
      throw new CoreError('conflict', `The model '${model.id}' already exists: change it with update, setPrices, enable or disable.`, { param: 'model.id', reason: 'model_exists' });
    }
    await recordAudit(tx, c.operator, { action: 'model.create', targetType: 'model', targetId: model.id, reason: input.reason, after: { enabled: input.enabled, definition: input.model } }, c.requestId);
    return readAdminModel(deps, tx, model.id);
  });
  deps.catalog.invalidate();
  return created;
}
