import type { EntityManager } from '@mikro-orm/postgresql';
import { requireMediaModel } from '../catalog/catalog.ts';
import { mediaPrice } from '../catalog/pricing.ts';
import type { CoreDeps } from '../context.ts';
import { CoreError, invalid, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import type { Principal } from '../keys/authenticate.ts';
import { reserve } from '../money/holds.ts';
import type { CreateGenerationInput } from './schema.ts';
import type { MediaModel } from '../catalog/schema.ts';
import { forgetIdempotencyKey, idempotent, requestHash } from '../idempotency.ts';
import { validateInputs, validateSettings } from './validate.ts';
import { cancelJob, failJob, loadJob } from './lifecycle.ts';
import { findOwnFile } from '../files/files.ts';
import { generationView } from './views.ts';

/** SPEC part 8: at most 5 media jobs not yet finished per API key. */
export const MAX_ACTIVE_JOBS_PER_KEY = 5;
/** A job's hold outlives its deadline by this much before the sweep may release it. */
const HOLD_MARGIN_SECONDS = 15 * 60;

/**
 * POST /generations: validate against the model and price the settings, then in one
 * transaction check the key's running jobs (its row locked, so parallel submissions cannot
 * all pass), reserve the price, record the job and (with an Idempotency-Key) its response;
 * after the commit, start the job's workflow. A crash between the commit and the start
 * leaves a queued job that the sweep schedule starts later.
 */
export async function createGeneration(
  deps: CoreDeps,
  em: EntityManager,
  principal: Principal,
  call: { body: CreateGenerationInput; idempotency_key?: string | undefined; wait_seconds?: number | undefined },
) {
  const input = call.body;
  const model = await deps.catalog.get(em, input.model);
  requireMediaModel(model);
  if (model.paid_only && !principal.paid) {
    throw new CoreError('paid_account_required', `The model '${model.id}' needs a paid account: make a first top-up or subscribe.`);
  }
  if (!deps.media.get(model.provider.name)) {
    throw new CoreError('unavailable', `The provider of '${model.id}' is not configured on this server.`, { reason: 'provider_unavailable' });
  }
  const settings = validateSettings(model, input.settings);
  const inputs = await validateInputs(model, input.inputs, deps.urlGuard, (id) => findOwnFile(em, principal.accountId, id));
  if (input.webhook_url !== undefined) {
    await deps.urlGuard.check(input.webhook_url).catch((err: unknown) => {
      throw invalid('webhook_url', `Invalid value for 'webhook_url': ${(err as Error).message}.`, 'invalid_url');
    });
  }
  const price = mediaPrice(model, settings, deps.config.apiPricePercent);
  const idem = call.idempotency_key
    ? { accountId: principal.accountId, scope: 'generations.create', key: call.idempotency_key, hash: requestHash(input) }
    : undefined;

  let created: string | undefined;
  const result = await em.transactional(async (tx) => {
    const accept = async () => {
      created = await acceptJob(deps, tx, principal, { model, prompt: input.prompt, settings, inputs, price, webhookUrl: input.webhook_url ?? null });
      return { status: 202, body: generationView(await loadJob(tx, created), deps.signer) };
    };
    return idem ? idempotent(tx, idem, accept) : { ...(await accept()), replayed: false };
  });

  if (created) {
    try {
      await deps.generations.start(created);
    } catch (err) {
      deps.logger.error({ err, job: created }, 'could not start the job workflow');
      await failJob(em, created, { message: 'The job could not be started. It was refunded in full.', code: 'start_failed' });
      if (idem) await forgetIdempotencyKey(em, idem);
      throw new CoreError('unavailable', 'The job runner is not reachable. Nothing was charged; retry shortly.', { reason: 'job_runner_unavailable' });
    }
  }
  if (call.wait_seconds) {
    const finished = await waitForEnd(deps, em, result.body.id, call.wait_seconds);
    if (finished) return { status: 200, body: finished, replayed: result.replayed };
  }
  return result;
}

async function acceptJob(
  deps: CoreDeps,
  tx: EntityManager,
  principal: Principal,
  job: { model: MediaModel; prompt: string; settings: Record<string, unknown>; inputs: Record<string, string | string[]>; price: bigint; webhookUrl: string | null },
): Promise<string> {
  const id = newId('gen');
  await tx.execute('select id from api_keys where id = ? for update', [principal.keyId]);
  const [active] = await tx.execute<{ n: number }[]>(`select count(*)::int as n from generations where key_id = ? and status in ('queued', 'running')`, [
    principal.keyId,
  ]);
  if (active!.n >= MAX_ACTIVE_JOBS_PER_KEY) {
    throw new CoreError('rate_limited', `This API key already has ${MAX_ACTIVE_JOBS_PER_KEY} media jobs that have not finished. Wait for one to end.`, {
      reason: 'concurrency_limit_exceeded',
      retryAfterSeconds: 5,
    });
  }
  const { holdId } = await reserve(tx, {
    accountId: principal.accountId,
    amount: job.price,
    reference: id,
    holdId: `hold_${id}`,
    expiresAt: new Date(deps.clock().getTime() + (job.model.deadline_seconds + HOLD_MARGIN_SECONDS) * 1000),
    metadata: { kind: 'generation', model: job.model.id, key_id: principal.keyId },
  });
  await tx.execute(
    `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id, webhook_url)
     values (?, ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?::bigint, ?, ?)`,
    [id, principal.accountId, principal.keyId, job.model.id, job.prompt, JSON.stringify(job.settings), JSON.stringify(job.inputs), job.price.toString(), holdId, job.webhookUrl],
  );
  return id;
}

/** Prefer: wait=N — the job once it has ended, or undefined if it is still going after N seconds. */
async function waitForEnd(deps: CoreDeps, em: EntityManager, id: string, seconds: number) {
  const until = Date.now() + seconds * 1000;
  let pause = 50;
  for (;;) {
    const job = await loadJob(em, id);
    if (job.status !== 'queued' && job.status !== 'running') return generationView(job, deps.signer);
    if (Date.now() + pause > until) return undefined;
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 500);
  }
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
