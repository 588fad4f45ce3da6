import { recordAudit } from '../audit.ts';
import type { ModelCtx } from './create-model.ts';
import { lockModel, readAdminModel, type ModelDeps } from './model-row.ts';

/**
 * Opens or closes a model to new requests. A disabled model is refused for new chats and jobs
 * as an unknown one is (model_not_found) and leaves the API's model list; chats and jobs already
 * accepted run to their end, at the price they were accepted at. The entry, its prices and its
 * schedule stay, so enabling it again restores it as it was.
 */
export async function setModelEnabled(deps: ModelDeps, c: ModelCtx, input: { id: string; reason?: string | undefined }, enabled: boolean) {
  const result = await c.em.transactional(async (tx) => {
    const row = await lockModel(tx, input.id);
    const disabledAt = enabled ? null : (row.disabled_at ?? deps.clock());
    await tx.execute('update models set disabled_at = ?, updated_at = now() where id = ?', [disabledAt, row.id]);
    await recordAudit(
      tx,
      c.operator,
      {
        action: enabled ? 'model.enable' : 'model.disable',
        targetType: 'model',
        targetId: row.id,
        reason: input.reason,
        before: { enabled: row.disabled_at === null, disabled_at: row.disabled_at?.toISOString() ?? null },
        after: { enabled, disabled_at: disabledAt?.toISOString() ?? null },
      },
      c.requestId,
    );
    return readAdminModel(deps, tx, row.id);
  });
  deps.catalog.invalidate();
  return result;
}
