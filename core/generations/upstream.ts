import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { ModelCatalog } from '../catalog/catalog.ts';
import { mediaPrice } from '../catalog/pricing.ts';
import type { MediaModel, MediaRoute } from '../catalog/schema.ts';
import { MediaProviderError, type MediaProviderRegistry, type RouteBreakers } from '../ports.ts';

/**
 * The job's upstream (docs/providers.md, "Media routes" and "Cancel reaches the upstream"):
 * which route took it, the upstream's handle, what it cost upstream, and the one call that
 * asks the upstream to stop it.
 */

/**
 * The refusals on the request's merits: every route would refuse the same request, so the job
 * fails at once with this code. Any other failure of a route (it could not be reached, timed
 * out, 5xx, 429, our key refused, the provider failed the job) moves the job to the next route.
 */
const ON_MERITS = new Set(['content_policy', 'invalid_input', 'result_too_large']);
export const refusedOnMerits = (code: string | undefined): boolean => code !== undefined && ON_MERITS.has(code);

/**
 * The refusals of a step whose job is over (assertJobMayCallUpstream): no route may take it any
 * more, and the step made no upstream call.
 */
const JOB_OVER = new Set(['job_ended', 'reservation_expired']);
export const jobIsOver = (code: string | undefined): boolean => code !== undefined && JOB_OVER.has(code);

/**
 * Before a step starts upstream work for a job (a submit, the result's fetch): the job must still
 * be running and its reservation open and not expired. A job canceled through the API (between a
 * route's retries, or before the next route's submit), ended otherwise, or whose hold the sweep
 * released or is about to release (it outlived its deadline and the hold's margin) gets no new
 * upstream call: nobody would pay for it. A call that started just before the job ended is stopped
 * when its handle is written (recordUpstreamHandle).
 */
export async function assertJobMayCallUpstream(em: EntityManager, id: string): Promise<void> {
  const [row] = await em.execute<{ status: string; hold_open: boolean }[]>(
    `select g.status, (h.status = 'open' and h.expires_at > now()) as hold_open
     from generations g join holds h on h.id = g.hold_id where g.id = ?`,
    [id],
  );
  if (!row || row.status !== 'running') {
    throw new MediaProviderError('refused', 'job_ended', 'The job ended before this step; nothing was sent to the provider.');
  }
  if (!row.hold_open) throw new MediaProviderError('refused', 'reservation_expired', RESERVATION_EXPIRED);
}

/** What a job says when its reservation ended before the job did (the sweep released it); the same words as completeJob's. */
export const RESERVATION_EXPIRED = 'The reservation expired before the job finished. It was refunded in full.';

/**
 * A submit as one call of the route's breaker. Only submits count: a poll or a result fetch of
 * a job the route already took says little of whether the route takes new work, and polls
 * would swamp the count. A refusal on the request's merits is the route answering: a success.
 */
export async function throughBreaker<T>(breakers: RouteBreakers, attempt: { route: string; fallback: boolean }, call: () => Promise<T>, unavailable: string): Promise<T> {
  const pass = await breakers.admit(attempt.route);
  if (!pass && attempt.fallback) throw new MediaProviderError('refused', 'route_unavailable', unavailable);
  if (!pass) return call();
  const started = performance.now();
  try {
    const result = await call();
    pass.done({ ok: true, latencyMs: performance.now() - started });
    return result;
  } catch (err) {
    const latencyMs = performance.now() - started;
    if (err instanceof MediaProviderError && refusedOnMerits(err.code)) pass.done({ ok: true, latencyMs });
    else pass.done({ ok: false, latencyMs, retryAfterMs: err instanceof MediaProviderError ? err.retryAfterMs : undefined });
    throw err;
  }
}

type UpstreamDeps = { media: MediaProviderRegistry; logger: Logger };

/**
 * Keeps the route and the handle on the job's row as soon as the provider accepted the job, so
 * that a cancel, a Terminate and the orphan sweep can stop it upstream. Idempotent: a retried
 * submit writes the same values; a new handle (the next route) clears the cancel mark. If the
 * job ended meanwhile (canceled while the submit was in flight), the upstream job is stopped now:
 * whoever ended the job may have looked for a handle before this one was written.
 */
export async function recordUpstreamHandle(deps: UpstreamDeps, em: EntityManager, id: string, route: { provider: string; model: string }, handle: string): Promise<void> {
  const [row] = await em.execute<{ status: string }[]>(
    `update generations set provider = ?, route_model = ?, upstream_handle = ?,
       upstream_canceled_at = case when upstream_handle is distinct from ? then null else upstream_canceled_at end
     where id = ? returning status`,
    [route.provider, route.model, handle, handle, id],
  );
  if (row && row.status !== 'queued' && row.status !== 'running') await cancelJobUpstream(deps, em, id);
}

/**
 * Asks the provider to stop the job's upstream work, from the handle on its row: once per
 * handle (the first caller marks the row; later ones find it marked and do nothing), and only
 * where the provider has a cancel. Best effort: a failure is logged for the operator and never
 * thrown, so it cannot hold up a refund. Answers whether the provider's cancel was called.
 */
export async function cancelJobUpstream(deps: UpstreamDeps, em: EntityManager, id: string): Promise<boolean> {
  const [row] = await em.execute<{ provider: string; upstream_handle: string }[]>(
    `update generations set upstream_canceled_at = now()
     where id = ? and upstream_handle is not null and provider is not null and upstream_canceled_at is null
     returning provider, upstream_handle`,
    [id],
  );
  if (!row) return false;
  const provider = deps.media.get(row.provider);
  if (!provider?.cancel) return false;
  try {
    await provider.cancel(row.upstream_handle);
    deps.logger.info({ job: id, provider: row.provider }, 'asked the upstream to stop the job');
    return true;
  } catch (err) {
    deps.logger.warn({ job: id, provider: row.provider, err: err instanceof Error ? err.message : String(err) }, 'could not ask the upstream to stop the job');
    return false;
  }
}

/**
 * What a succeeded job cost upstream, in micro-coins, on its row: the serving route's `cost`
 * priced with the job's settings (the same price function, at 100 %), or null when the route
 * names none. No media upstream reports a reliable cost in its answer today (fal, OpenAI,
 * ElevenLabs and Replicate do not), so the catalog's figure is the only source. Idempotent.
 */
export async function recordUpstreamCost(deps: { catalog: ModelCatalog }, em: EntityManager, id: string): Promise<void> {
  const [job] = await em.execute<{ model_id: string; settings: Record<string, unknown>; provider: string | null; route_model: string | null }[]>(
    `select model_id, settings, provider, route_model from generations where id = ? and status = 'succeeded'`,
    [id],
  );
  if (!job?.provider) return;
  const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true }).catch(() => undefined);
  if (!model || model.type === 'text') return;
  const route = (model.routes as MediaRoute[]).find((r) => r.provider === job.provider && r.model === job.route_model);
  if (!route?.cost) return;
  const cost = mediaPrice({ ...model, pricing: route.cost } as MediaModel, job.settings, 100n);
  await em.execute('update generations set upstream_cost_micro = ?::bigint where id = ?', [cost.toString(), id]);
}
