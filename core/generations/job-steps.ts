import type { EntityManager } from '@mikro-orm/postgresql';
import type { ModelCatalog } from '../catalog/catalog.ts';
import { CoreError } from '../errors.ts';
import { readFileBytes } from '../files/read-file.ts';
import type { Clock, GenerationStarter, InputReader, MediaJobSpec, MediaPollResult, MediaProviderRegistry, ResultStorage, UrlGuard, UrlSigner } from '../ports.ts';
import { endingOf } from './end-job.ts';
import { deleteResult } from './retention.ts';
import { jobWorkflowStart, loadJob, recordRunId, type JobRow, type StoredOutput } from './job-row.ts';

/**
 * The steps of a job's workflow before it ends (workflows/generation.workflow.ts), as core
 * functions its activities call. Each is idempotent: an activity may run twice.
 */

/** Marks the job running and returns what the workflow needs, or `ended` when it already ended. */
export async function beginJob(deps: { catalog: ModelCatalog }, em: EntityManager, id: string) {
  await em.execute(`update generations set status = 'running', started_at = now() where id = ? and status = 'queued'`, [id]);
  const job = await loadJob(em, id);
  if (job.status !== 'running') return { ended: true as const, ...endingOf(job) };
  // A model disabled since the job was accepted still runs it.
  const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true }).catch(() => undefined);
  const webhook = job.webhook_url !== null;
  if (!model || model.type === 'text') return { ended: false as const, missingModel: true as const, deadlineSeconds: 0, webhook };
  return { ended: false as const, missingModel: false as const, deadlineSeconds: model.deadline_seconds, webhook };
}

async function jobSpec(deps: { catalog: ModelCatalog }, em: EntityManager, id: string): Promise<{ spec: MediaJobSpec; provider: string }> {
  const job = await loadJob(em, id);
  const model = await deps.catalog.get(em, job.model_id, { includeDisabled: true });
  if (model.type === 'text') throw new CoreError('invalid_request', `The model '${model.id}' is not a media model.`, { reason: 'wrong_model_type' });
  return {
    provider: model.provider.name,
    spec: { jobId: id, model: model.provider.model, type: model.type, prompt: job.prompt, settings: job.settings, inputs: job.inputs },
  };
}

function providerOf(media: MediaProviderRegistry, name: string) {
  const provider = media.get(name);
  if (!provider) throw new CoreError('unavailable', `The media provider '${name}' is not configured on this server.`, { reason: 'provider_unavailable' });
  return provider;
}

export const isFileId = (value: string) => /^file_[0-9A-Za-z]{1,64}$/.test(value);

type SubmitDeps = { catalog: ModelCatalog; media: MediaProviderRegistry; storage: ResultStorage; urlGuard: UrlGuard; signer: UrlSigner; clock: Clock };

export async function submitJob(deps: SubmitDeps, em: EntityManager, id: string): Promise<{ provider: string; handle: string }> {
  const { spec, provider } = await jobSpec(deps, em, id);
  return { provider, handle: await providerOf(deps.media, provider).submit(spec, inputReader(deps, em)) };
}

/** Reads a job's inputs: an uploaded file from storage, a URL through the URL guard. */
function inputReader(deps: Omit<SubmitDeps, 'catalog' | 'media'>, em: EntityManager): InputReader {
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
  deps: Omit<SubmitDeps, 'catalog'>,
  em: EntityManager,
  id: string,
  provider: string,
  handle: string,
): Promise<StoredOutput> {
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
