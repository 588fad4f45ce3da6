import { activeTraceId, annotate } from '../telemetry.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { requireModelAllowed, type SpendingPrincipal } from '../auth/principals.ts';
import { requireMediaModel, type ModelCatalog } from '../catalog/catalog.ts';
import { mediaPrice } from '../catalog/pricing.ts';
import type { MediaModel } from '../catalog/schema.ts';
import type { CoreConfig } from '../context.ts';
import { CoreError, invalid } from '../errors.ts';
import { findOwnFile } from '../files/file-row.ts';
import { forgetIdempotencyKey, idempotent, requestHash } from '../idempotency.ts';
import { newId } from '../ids.ts';
import { reserve } from '../money/holds.ts';
import type { Clock, GenerationStarter, MediaProviderRegistry, UrlGuard, UrlSigner } from '../ports.ts';
import { failJob } from './end-job.ts';
import { jobWorkflowStart, loadJob, recordRunId } from './job-row.ts';
import { waitForEnd } from './read-generation.ts';
import type { CreateGenerationInput } from './schema.ts';
import { validateInputs, validateSettings } from './validate.ts';
import { generationView, type GenerationView } from './views.ts';

/** SPEC part 8: at most 5 media jobs not yet finished per API key. */
export const MAX_ACTIVE_JOBS_PER_KEY = 5;
/** A job's hold outlives its deadline by this much before the sweep may release it. */
const HOLD_MARGIN_SECONDS = 15 * 60;

type Deps = {
  catalog: ModelCatalog;
  media: MediaProviderRegistry;
  urlGuard: UrlGuard;
  signer: UrlSigner;
  clock: Clock;
  config: CoreConfig;
  generations: GenerationStarter;
  logger: Logger;
};

/**
 * Starts a media job: validate against the model and price the settings, then in one
 * transaction check the key's unfinished jobs (its row locked, so parallel submissions cannot
 * all pass), reserve the price, record the job (and, with an idempotency key, the result);
 * after the commit, start the job's workflow. A crash between the commit and the start leaves
 * a queued job that the sweep schedule starts later. With `wait_seconds`, the job as it is
 * once it ended or the wait ran out.
 */
export async function createGeneration(
  deps: Deps,
  em: EntityManager,
  principal: SpendingPrincipal,
  input: CreateGenerationInput,
): Promise<{ generation: GenerationView; replayed: boolean; expected_seconds: number | null }> {
  const { idempotency_key: idempotencyKey, wait_seconds: waitSeconds, ...request } = input;
  // The price in force at the request's time; the job keeps it (price_micro) whatever changes later.
  const model = await deps.catalog.get(em, request.model, { at: deps.clock() });
  requireModelAllowed(principal, model.id);
  requireMediaModel(model);
  if (model.paid_only && !principal.paid) {
    throw new CoreError('paid_account_required', `The model '${model.id}' needs a paid account: make a first top-up or subscribe.`, { param: 'model' });
  }
  if (!deps.media.get(model.provider.name)) {
    throw new CoreError('unavailable', `The provider of '${model.id}' is not configured on this server.`, { reason: 'provider_unavailable' });
  }
  const settings = validateSettings(model, request.settings);
  const inputs = await validateInputs(model, request.inputs, deps.urlGuard, (id) => findOwnFile(em, principal.accountId, id));
  if (request.webhook_url !== undefined) {
    await deps.urlGuard.check(request.webhook_url).catch((err: unknown) => {
      throw invalid('webhook_url', `Invalid value for 'webhook_url': ${(err as Error).message}.`, 'invalid_url');
    });
  }
  const price = mediaPrice(model, settings, deps.config.apiPricePercent);
  const idem = idempotencyKey ? { accountId: principal.accountId, scope: 'generations.create', key: idempotencyKey, hash: requestHash(request) } : undefined;

  let created: string | undefined;
  const accepted = await em.transactional(async (tx) => {
    const accept = async () => {
      created = await acceptJob(deps, tx, principal, { model, prompt: request.prompt, settings, inputs, price, webhookUrl: request.webhook_url ?? null });
      return generationView(await loadJob(tx, created), deps.signer);
    };
    return idem ? idempotent(tx, idem, accept) : { result: await accept(), replayed: false };
  });

  if (created) {
    try {
      const job = { id: created, account_id: principal.accountId, key_id: principal.keyId, model_id: model.id, price_micro: price.toString(), prompt: request.prompt };
      await recordRunId(em, created, await deps.generations.start(jobWorkflowStart(job, model.type)));
    } catch (err) {
      deps.logger.error({ err, job: created }, 'could not start the job workflow');
      await failJob(em, created, { message: 'The job could not be started. It was refunded in full.', code: 'start_failed' });
      if (idem) await forgetIdempotencyKey(em, idem);
      throw new CoreError('unavailable', 'The job runner is not reachable. Nothing was charged; retry shortly.', { reason: 'job_runner_unavailable' });
    }
  }
  const generation = waitSeconds ? ((await waitForEnd(deps, em, accepted.result.id, waitSeconds)) ?? accepted.result) : accepted.result;
  // How long the model's jobs usually take, when the catalog says (MCP progress reports against it).
  return { generation, replayed: accepted.replayed, expected_seconds: model.expected_seconds ?? null };
}

async function acceptJob(
  deps: Pick<Deps, 'clock'>,
  tx: EntityManager,
  principal: SpendingPrincipal,
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
    // An app's reservation counts against its spend cap (mas_reserve) and names it in the ledger.
    metadata: { kind: 'generation', model: job.model.id, key_id: principal.keyId, ...(principal.kind === 'app_connection' ? { app_connection_id: principal.connectionId } : {}) },
  });
  await tx.execute(
    `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id, webhook_url, trace_id)
     values (?, ?, ?, ?, ?, ?::jsonb, ?::jsonb, ?::bigint, ?, ?, ?)`,
    [id, principal.accountId, principal.keyId, job.model.id, job.prompt, JSON.stringify(job.settings), JSON.stringify(job.inputs), job.price.toString(), holdId, job.webhookUrl, activeTraceId() ?? null],
  );
  // Tracing on: the submit's span names the job (core/telemetry.ts).
  annotate(() => ({ 'mas.job_id': id }));
  return id;
}
