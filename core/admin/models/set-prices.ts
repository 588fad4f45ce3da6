import { entryProblem, withPrices } from '../../catalog/price-schedule.ts';
import { invalid, notFound } from '../../errors.ts';
import { recordAudit } from '../audit.ts';
import { refuse } from './check.ts';
import type { ModelCtx } from './create-model.ts';
import { createdBy, inForce, lockModel, priceRows, readAdminModel, type ModelDeps } from './model-row.ts';
import type { CancelPricesInput, SetPricesInput } from './schema.ts';

/** A time this close before now counts as now: the operator's clock and the server's differ a little. */
const CLOCK_SKEW_MS = 60_000;

/**
 * Schedules a model's prices from a date: now, or later. Every request priced from then on pays
 * them (chat and job creation take the price in force at the request's time); a request
 * accepted before keeps its price. Past prices are history and never change; a change still to
 * come may be replaced (the same date) or cancelled. The prices are checked against the model
 * as a catalog entry's are.
 */
export async function setPrices(deps: ModelDeps, c: ModelCtx, input: SetPricesInput) {
  const now = deps.clock();
  const asked = input.effective_from === undefined ? now : new Date(input.effective_from);
  if (asked.getTime() < now.getTime() - CLOCK_SKEW_MS) {
    throw invalid('effective_from', `Invalid value for 'effective_from': ${asked.toISOString()} is in the past (now is ${now.toISOString()}); prices change from now or a later time.`, 'in_the_past');
  }
  const from = asked.getTime() < now.getTime() ? now : asked;
  const result = await c.em.transactional(async (tx) => {
    const row = await lockModel(tx, input.id);
    const problem = entryProblem(withPrices(row.definition, input.prices), deps.config.apiPricePercent);
    if (problem) refuse('prices', { ...problem, path: problem.path[0] === 'pricing' ? problem.path.slice(1) : problem.path });
    const rows = await priceRows(tx, row.id);
    const replaced = rows.find((r) => r.effective_from.getTime() === from.getTime());
    const until = inForce(rows.filter((r) => r !== replaced), from);
    await tx.execute(
      `insert into model_prices (model_id, effective_from, prices, created_by) values (?, ?, ?::jsonb, ?)
       on conflict (model_id, effective_from) do update set prices = excluded.prices, created_by = excluded.created_by, created_at = now()`,
      [row.id, from, JSON.stringify(input.prices), createdBy(c.operator)],
    );
    await recordAudit(
      tx,
      c.operator,
      {
        action: 'model.prices.schedule',
        targetType: 'model',
        targetId: row.id,
        reason: input.reason,
        // What would have been in force from that date without this change.
        before: { effective_from: from.toISOString(), pricing: until?.prices ?? row.definition.pricing, ...(replaced ? { replaced: replaced.prices } : {}) },
        after: { effective_from: from.toISOString(), pricing: input.prices },
      },
      c.requestId,
    );
    return readAdminModel(deps, tx, row.id);
  });
  deps.catalog.invalidate();
  return result;
}

/** Cancels a price change that has not started yet; one in force or past is history and stays. */
export async function cancelPrices(deps: ModelDeps, c: ModelCtx, input: CancelPricesInput) {
  const from = new Date(input.effective_from);
  const result = await c.em.transactional(async (tx) => {
    const row = await lockModel(tx, input.id);
    const rows = await priceRows(tx, row.id);
    const target = rows.find((r) => r.effective_from.getTime() === from.getTime());
    if (!target) throw notFound('price_change_not_found', `The model '${row.id}' has no price change scheduled from ${from.toISOString()}.`, 'effective_from');
    if (from.getTime() <= deps.clock().getTime()) {
      throw invalid('effective_from', `The price change from ${from.toISOString()} has started: prices in force or past stay as history. Schedule new prices instead.`, 'price_change_started');
    }
    await tx.execute('delete from model_prices where model_id = ? and effective_from = ?', [row.id, target.effective_from]);
    const instead = inForce(rows.filter((r) => r !== target), from);
    await recordAudit(
      tx,
      c.operator,
      {
        action: 'model.prices.cancel',
        targetType: 'model',
        targetId: row.id,
        reason: input.reason,
        before: { effective_from: from.toISOString(), pricing: target.prices },
        after: { effective_from: from.toISOString(), pricing: instead?.prices ?? row.definition.pricing },
      },
      c.requestId,
    );
    return readAdminModel(deps, tx, row.id);
  });
  deps.catalog.invalidate();
  return result;
}
