import type { EntityManager } from '@mikro-orm/postgresql';
import { requireMediaModel } from '../catalog/catalog.ts';
import { mediaPrice } from '../catalog/pricing.ts';
import type { CoreDeps } from '../context.ts';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import type { Principal } from '../keys/authenticate.ts';
import { reserve } from '../money/holds.ts';
import type { CreateGenerationInput } from './schema.ts';
import { validateInputs, validateSettings } from './validate.ts';
import { cancelJob, failJob, loadJob } from './lifecycle.ts';
import { generationView } from './views.ts';

/** SPEC part 8: at most 5 media jobs not yet finished per API key. */
export const MAX_ACTIVE_JOBS_PER_KEY = 5;
/** A job's hold outlives its deadline by this much before the sweep may release it. */
const HOLD_MARGIN_SECONDS = 15 * 60;

/**
 * POST /generations: validate against the model, price the settings, then in one transaction
 * check the key's running jobs (its row locked, so parallel submissions cannot all pass),
 * reserve the price and record the job; then start the job's workflow. A crash between the
 * commit and the start leaves a queued job that the sweep schedule starts later.
 */
export async function createGeneration(deps: CoreDeps, em: EntityManager, principal: Principal, input: CreateGenerationInput) {
  const model = await deps.catalog.get(em, input.model);
  requireMediaModel(model);
  if (model.paid_only && !principal.paid) {
    throw new CoreError('paid_account_required', `The model '${model.id}' needs a paid account: make a first top-up or subscribe.`);
  }
  if (!deps.media.get(model.provider.name)) {
    throw new CoreError('unavailable', `The provider of '${model.id}' is not configured on this server.`, { reason: 'provider_unavailable' });
  }
  const settings = validateSettings(model, input.settings);
  const inputs = await validateInputs(model, input.inputs, deps.urlGuard);
  const price = mediaPrice(model, settings, deps.config.apiPricePercent);
  const id = newId('gen');

  await em.transactional(async (tx) => {
    await tx.execute('select id from api_keys where id = ? for update', [principal.keyId]);
    const [active] = await tx.execute<{ n: number }[]>(
      `select count(*)::int as n from generations where key_id = ? and status in ('queued', 'running')`,
      [principal.keyId],
    );
    if (active!.n >= MAX_ACTIVE_JOBS_PER_KEY) {
      throw new CoreError('rate_limited', `This API key already has ${MAX_ACTIVE_JOBS_PER_KEY} media jobs that have not finished. Wait for one to end.`, {
        reason: 'concurrency_limit_exceeded',
        retryAfterSeconds: 5,
      });
    }
    const { holdId } = await reserve(tx, {
      accountId: principal.accountId,
      amount: price,
      reference: id,
      holdId: `hold_${id}`,
      expiresAt: new Date(deps.clock().getTime() + (model.deadline_seconds + HOLD_MARGIN_SECONDS) * 1000),
      metadata: { kind: 'generation', model: model.id, key_id: principal.keyId },
    });
    await tx.execute(
      `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id)
       values (?, ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?::bigint, ?)`,
      [id, principal.accountId, principal.keyId, model.id, input.prompt, JSON.stringify(settings), JSON.stringify(inputs), price.toString(), holdId],
    );
  });

  try {
    await deps.generations.start(id);
  } catch (err) {
    deps.logger.error({ err, job: id }, 'could not start the job workflow');
    await failJob(em, id, { message: 'The job could not be started. It was refunded in full.', code: 'start_failed' });
    throw new CoreError('unavailable', 'The job runner is not reachable. Nothing was charged; retry shortly.', { reason: 'job_runner_unavailable' });
  }
  return generationView(await loadJob(em, id), deps.signer);
}

/** GET /generations/{id}: another account's job is as unknown as a missing one. */
export async function getGeneration(deps: CoreDeps, em: EntityManager, principal: Principal, id: string) {
  const job = await loadJob(em, id).catch(() => undefined);
  if (!job || job.account_id !== principal.accountId) throw notFound('generation_not_found', `No generation ${id}.`);
  return generationView(job, deps.signer);
}

/** POST /generations/{id}/cancel: refunded in full if it had not finished; 409 if it had. */
export async function cancelGeneration(deps: CoreDeps, em: EntityManager, principal: Principal, id: string) {
  const job = await loadJob(em, id).catch(() => undefined);
  if (!job || job.account_id !== principal.accountId) throw notFound('generation_not_found', `No generation ${id}.`);
  const canceled = await cancelJob(em, id);
  // The money and status are settled above; stopping the work is best effort.
  await deps.generations.cancel(id).catch((err: unknown) => deps.logger.warn({ err, job: id }, 'could not cancel the job workflow'));
  return generationView(canceled, deps.signer);
}
