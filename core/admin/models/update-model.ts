import { isDeepStrictEqual } from 'node:util';
import { liveSchedules, scheduleProblem } from '../../catalog/price-schedule.ts';
import { invalid } from '../../errors.ts';
import type { MediaProviderRegistry, ProviderRegistry } from '../../ports.ts';
import { recordAudit } from '../audit.ts';
import { checkEntry, requireProvider } from './check.ts';
import type { ModelCtx } from './create-model.ts';
import { lockModel, readAdminModel, type ModelDeps } from './model-row.ts';
import type { UpdateModelInput } from './schema.ts';

/**
 * Replaces top-level fields of a model's entry (name, description, settings, limits, provider,
 * …); not its id, type or prices. The entry must stay valid as a catalog entry, and so must the
 * prices scheduled in force or to come (a media price may name the settings it prices by).
 * Requests already accepted keep what they were accepted with. The audit entry holds the
 * changed fields before and after.
 */
export async function updateModel(deps: ModelDeps & { providers: ProviderRegistry; media: MediaProviderRegistry }, c: ModelCtx, input: UpdateModelInput) {
  const updated = await c.em.transactional(async (tx) => {
    const row = await lockModel(tx, input.id);
    const next: Record<string, unknown> = { ...row.definition };
    for (const [key, value] of Object.entries(input.changes)) {
      if (value === null) delete next[key];
      else next[key] = value;
    }
    const model = checkEntry(next, 'changes', deps.config.apiPricePercent);
    if (!isDeepStrictEqual(row.definition.provider, next.provider) || !isDeepStrictEqual(row.definition.routes, next.routes)) requireProvider(deps, model, 'changes', next);
    const problem = scheduleProblem(next, (await liveSchedules(tx, deps.clock(), row.id)).get(row.id) ?? [], deps.config.apiPricePercent);
    if (problem) {
      throw invalid(
        'changes',
        `The price scheduled from ${problem.from.toISOString()} would no longer fit the model (${problem.path.join('.')}: ${problem.message}). Schedule prices that fit it first.`,
        'scheduled_prices_conflict',
      );
    }
    await tx.execute('update models set definition = ?::jsonb, updated_at = now() where id = ?', [JSON.stringify(next), row.id]);
    const keys = Object.keys(input.changes);
    await recordAudit(
      tx,
      c.operator,
      {
        action: 'model.update',
        targetType: 'model',
        targetId: row.id,
        reason: input.reason,
        before: Object.fromEntries(keys.map((k) => [k, row.definition[k] ?? null])),
        after: Object.fromEntries(keys.map((k) => [k, next[k] ?? null])),
      },
      c.requestId,
    );
    return readAdminModel(deps, tx, row.id);
  });
  deps.catalog.invalidate();
  return updated;
}
