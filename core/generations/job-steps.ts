import type { CoreConfig } from '../context.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ModelCatalog } from '../catalog/catalog.ts';
import { CoreError } from '../errors.ts';
import { readFileBytes } from '../files/read-file.ts';
import type { Logger } from 'pino';
import { routeOrder } from '../catalog/routes.ts';
import { routeKey, type MediaRoute } from '../catalog/schema.ts';
import { MediaProviderError } from '../ports.ts';
import type { Clock, GenerationStarter, InputReader, MediaJobSpec, MediaPollResult, MediaProviderRegistry, ResultStorage, RouteBreakers, UrlGuard, UrlSigner } from '../ports.ts';
import { assertJobMayCallUpstream, recordUpstreamHandle, throughBreaker } from './upstream.ts';
import { endingOf } from './end-job.ts';
import { deleteResult } from './retention.ts';
import { jobWorkflowStart, loadJob, recordRunId, type JobRow, type StoredOutput } from './job-row.ts';

/**
 * The steps of a job's workflow before it ends (workflows/generation.workflow.ts), as core
 * functions its activities call. Each is idempotent: an activity may run twice.
 */

/** Marks the job running and returns what the workflow needs, or `ended` when it already ended. */
export async function beginJob(deps: { catalog: ModelCatalog; config?: Pick<CoreConfig, 'jobStepRetryInitialMs'> }, em: EntityManager, id: string) {
  await em.execute(`update generations set status = 'running', started_at = now() where id = ? and status = 'queued'`, [id]);
  const job = await loadJob(em, id);
  if (job.status !== 'running') return { ended: true as const, ...endingOf(job) };
  // A model disabled since the job was accepted still runs it.
  const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true }).catch(() => undefined);
  const webhook = job.webhook_url !== null;
  if (!model || model.type === 'text') return { ended: false as const, missingModel: true as const, deadlineSeconds: 0, webhook, routes: [] };
  // The order the workflow tries the routes in, drawn once here (weighted models draw at random): its history keeps it.
  // A shorter first retry wait than the workflow's 1 s when the service is wired with one (tests): the run's history keeps it.
  const retry = deps.config?.jobStepRetryInitialMs === undefined ? {} : { stepRetryInitialMs: deps.config.jobStepRetryInitialMs };
  return { ended: false as const, missingModel: false as const, deadlineSeconds: model.deadline_seconds, webhook, routes: routeOrder(model).map(routeKey), ...retry };
}

/** The job as its route's provider takes it: the route named (`provider/model`), or the model's first (workflows started before routes). */
async function jobSpec(deps: { catalog: ModelCatalog }, em: EntityManager, id: string, route?: string): Promise<{ spec: MediaJobSpec; route: MediaRoute }> {
  const job = await loadJob(em, id);
  const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true });
  if (model.type === 'text') throw new CoreError('invalid_request', `The model '${model.id}' is not a media model.`, { reason: 'wrong_model_type' });
  const chosen = route === undefined ? model.routes[0] : model.routes.find((r) => routeKey(r) === route);
  // The catalog changed since the job began: the route is gone, the workflow moves on to the next.
  if (!chosen) throw new MediaProviderError('refused', 'route_unavailable', ROUTE_UNAVAILABLE);
  // The provider's idempotency key: one per job and route, so that a retry of a route's
  // submit is the same upstream request, while the next route (perhaps at the same provider,
  // another model) is a new one, not a reuse of the key with other parameters.
  const jobId = route === undefined ? id : `${id}:${route}`;
  return {
    route: chosen,
    spec: { jobId, model: chosen.model, type: model.type, prompt: job.prompt, settings: job.settings, inputs: job.inputs },
  };
}

/** What a job says when its last route could not take it (its breaker open, or it left the catalog). */
const ROUTE_UNAVAILABLE = "None of the model's providers could take the job right now. Nothing was charged.";

function providerOf(media: MediaProviderRegistry, name: string) {
  const provider = media.get(name);
  if (!provider) throw new CoreError('unavailable', `The media provider '${name}' is not configured on this server.`, { reason: 'provider_unavailable' });
  return provider;
}

export const isFileId = (value: string) => /^file_[0-9A-Za-z]{1,64}$/.test(value);

type SubmitDeps = {
  catalog: ModelCatalog;
  media: MediaProviderRegistry;
  routeBreakers: RouteBreakers;
  logger: Logger;
  storage: ResultStorage;
  urlGuard: UrlGuard;
  signer: UrlSigner;
  clock: Clock;
};

/** One route's try of a job: `route` is its `provider/model`; `fallback`, whether another route follows it. */
export interface RouteTry {
  route: string;
  fallback: boolean;
}

/**
 * Hands the job to a provider and keeps the handle on the job's row (upstream.ts). With a route
 * (workflows since routes), the call goes through the route's breaker: an open breaker skips
 * the route at once when another follows (`route_unavailable`, not retried); the last route is
 * tried whatever its breaker says, so that the job fails on the provider's own answer.
 */
export async function submitJob(deps: SubmitDeps, em: EntityManager, id: string, attempt?: RouteTry): Promise<{ provider: string; handle: string }> {
  const { spec, route } = await jobSpec(deps, em, id, attempt?.route);
  await assertJobMayCallUpstream(em, id);
  const provider = attempt ? deps.media.get(route.provider) : providerOf(deps.media, route.provider);
  if (!provider) throw new MediaProviderError('refused', 'route_unavailable', ROUTE_UNAVAILABLE);
  const submit = () => provider.submit(spec, inputReader(deps, em));
  const handle = attempt ? await throughBreaker(deps.routeBreakers, attempt, submit, ROUTE_UNAVAILABLE) : await submit();
  await recordUpstreamHandle(deps, em, id, route, handle);
  return { provider: route.provider, handle };
}

/** Reads a job's inputs: an uploaded file from storage, a URL through the URL guard. */
function inputReader(deps: Omit<SubmitDeps, 'catalog' | 'media' | 'routeBreakers' | 'logger'>, em: EntityManager): InputReader {
  return {
    read: (value) => (isFileId(value) ? readFileBytes(deps, em, value) : deps.urlGuard.fetch(value)),
    url: (value) => (isFileId(value) ? deps.signer.sign(value, new Date(deps.clock().getTime() + 6 * 3_600_000), 'file') : value),
  };
}

export function pollJob(deps: { media: MediaProviderRegistry }, provider: string, handle: string): Promise<MediaPollResult> {
  return providerOf(deps.media, provider).poll(handle);
}

export async function cancelUpstream(deps: { media: MediaProviderRegistry }, provider: string, handle: string): Promise<void> {
  await providerOf(deps.media, provider).cancel?.(handle);
}

/** Copies the provider's result into our storage; returns where it is. */
export async function storeJobResult(
  deps: Omit<SubmitDeps, 'catalog' | 'routeBreakers' | 'logger'>,
  em: EntityManager,
  id: string,
  provider: string,
  handle: string,
): Promise<StoredOutput> {
  await assertJobMayCallUpstream(em, id);
  const result = await providerOf(deps.media, provider).fetchResult(handle, inputReader(deps, em));
  const filename = `${id}.${result.extension}`;
  const key = `generations/${filename}`;
  await deps.storage.put(key, result.bytes);
  return { key, mime_type: result.mimeType, bytes: result.bytes.length, filename };
}

/**
 * Deletes one job's stored result; the job keeps its record. Called by workflows started before
 * the retention schedule (their own timer); the schedule deletes results in batches (retention.ts).
 */
export async function deleteJobResult(deps: { storage: ResultStorage }, em: EntityManager, id: string) {
  const job = await loadJob(em, id);
  if (!job.output || job.output.deleted) return;
  await deleteResult(deps, em, id, job.output.key);
}

type StaleJob = Pick<JobRow, 'id' | 'account_id' | 'key_id' | 'model_id' | 'price_micro' | 'prompt'>;

/** Jobs still queued a while after they were accepted: their workflow may never have started. */
export async function staleQueuedJobs(em: EntityManager, olderThanSeconds: number): Promise<StaleJob[]> {
  return em.execute<StaleJob[]>(
    `select id, account_id, key_id, model_id, price_micro::text, prompt from generations
     where status = 'queued' and created_at < now() - make_interval(secs => ?) order by created_at limit 500`,
    [olderThanSeconds],
  );
}

/**
 * Starts the workflow of jobs left queued (a crash between accepting a job and starting it).
 * A job whose workflow exists already, open or closed, is not started again: one job, one
 * workflow run (a closed one is the orphan sweep's business, orphans.ts).
 */
export async function restartStaleJobs(deps: { catalog: ModelCatalog; generations: GenerationStarter }, em: EntityManager): Promise<{ started: number }> {
  const jobs = await staleQueuedJobs(em, 30);
  for (const job of jobs) {
    const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true }).catch(() => undefined);
    await recordRunId(em, job.id, await deps.generations.start(jobWorkflowStart(job, model?.type ?? 'unknown')));
  }
  return { started: jobs.length };
}
