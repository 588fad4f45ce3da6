import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import { CoreError, notFound } from '../errors.ts';
import { release, settle } from '../money/holds.ts';
import type { InputReader, MediaJobSpec, MediaPollResult } from './ports.ts';
import { readFileBytes } from '../files/files.ts';

/**
 * The steps of a job's workflow, as core functions the activities call. Each is idempotent:
 * an activity may run twice, and a job's hold ends exactly once (the hold functions guarantee
 * it; the status updates only move a job that has not ended).
 */
export interface JobRow {
  id: string;
  account_id: string;
  key_id: string;
  model_id: string;
  status: string;
  prompt: string;
  settings: Record<string, unknown>;
  inputs: Record<string, string | string[]>;
  price_micro: string;
  cost_micro: string | null;
  hold_id: string;
  output: StoredOutput | null;
  error: JobError | null;
  created_at: Date;
  started_at: Date | null;
  completed_at: Date | null;
  output_expires_at: Date | null;
  webhook_url: string | null;
}

export interface StoredOutput {
  key: string;
  mime_type: string;
  bytes: number;
  filename: string;
  deleted?: boolean;
}

export interface JobError {
  message: string;
  code: string;
}

export async function loadJob(em: EntityManager, id: string): Promise<JobRow> {
  const [row] = await em.execute<JobRow[]>('select *, price_micro::text, cost_micro::text from generations where id = ?', [id]);
  if (!row) throw notFound('generation_not_found', `No generation ${id}.`);
  return row;
}

/** Marks the job running and returns what the provider needs, or `ended` when it already ended. */
export async function beginJob(deps: CoreDeps, em: EntityManager, id: string) {
  await em.execute(`update generations set status = 'running', started_at = now() where id = ? and status = 'queued'`, [id]);
  const job = await loadJob(em, id);
  if (job.status !== 'running') return { ended: true as const };
  const model = await deps.catalog.get(em, job.model_id).catch(() => undefined);
  const webhook = job.webhook_url !== null;
  if (!model || model.type === 'text') return { ended: false as const, missingModel: true as const, deadlineSeconds: 0, webhook };
  return { ended: false as const, missingModel: false as const, deadlineSeconds: model.deadline_seconds, webhook };
}

async function jobSpec(deps: CoreDeps, em: EntityManager, id: string): Promise<{ spec: MediaJobSpec; provider: string }> {
  const job = await loadJob(em, id);
  const model = await deps.catalog.get(em, job.model_id);
  if (model.type === 'text') throw new CoreError('invalid_request', 'not a media model');
  return {
    provider: model.provider.name,
    spec: { jobId: id, model: model.provider.model, type: model.type, prompt: job.prompt, settings: job.settings, inputs: job.inputs },
  };
}

function providerOf(deps: CoreDeps, name: string) {
  const provider = deps.media.get(name);
  if (!provider) throw new CoreError('unavailable', `media provider ${name} is not configured`, { reason: 'provider_unavailable' });
  return provider;
}

export async function submitJob(deps: CoreDeps, em: EntityManager, id: string): Promise<{ provider: string; handle: string }> {
  const { spec, provider } = await jobSpec(deps, em, id);
  const inputs: InputReader = {
    read: (value) => (isFileId(value) ? readFileBytes(deps, em, value) : deps.urlGuard.fetch(value)),
    url: (value) => (isFileId(value) ? deps.signer.sign(value, new Date(deps.clock().getTime() + 6 * 3_600_000), 'file') : value),
  };
  return { provider, handle: await providerOf(deps, provider).submit(spec, inputs) };
}

export const isFileId = (value: string) => /^file_[0-9A-Za-z]{1,64}$/.test(value);

export function pollJob(deps: CoreDeps, provider: string, handle: string): Promise<MediaPollResult> {
  return providerOf(deps, provider).poll(handle);
}

export async function cancelUpstream(deps: CoreDeps, provider: string, handle: string): Promise<void> {
  await providerOf(deps, provider).cancel?.(handle);
}

/** Copies the provider's result into our storage; returns where it is. */
export async function storeJobResult(deps: CoreDeps, id: string, provider: string, handle: string): Promise<StoredOutput> {
  const result = await providerOf(deps, provider).fetchResult(handle);
  const filename = `${id}.${result.extension}`;
  const key = `generations/${filename}`;
  await deps.storage.put(key, result.bytes);
  return { key, mime_type: result.mimeType, bytes: result.bytes.length, filename };
}

/**
 * Ends a job: succeeded, failed or canceled. Every ending runs in one transaction holding the
 * job's row lock, ends the hold inside it and moves the status only from queued or running,
 * so completion, failure and cancellation racing each other produce exactly one outcome, and
 * the money always matches the status.
 */
async function endJob<T>(em: EntityManager, id: string, fn: (tx: EntityManager, job: JobRow) => Promise<T>): Promise<{ ended: JobRow } | { done: T }> {
  return em.transactional(async (tx) => {
    const [locked] = await tx.execute<{ status: string }[]>('select status from generations where id = ? for update', [id]);
    if (!locked) throw notFound('generation_not_found', `No generation ${id}.`);
    const job = await loadJob(tx, id);
    if (job.status !== 'queued' && job.status !== 'running') return { ended: job };
    return { done: await fn(tx, job) };
  });
}

/**
 * Settles the hold at the job's price and marks it succeeded, its link valid for an hour.
 * If the hold was already released (the sweep found it expired), the job ends failed and
 * refunded instead: a job is never delivered unpaid, nor paid twice.
 */
export async function completeJob(deps: CoreDeps, em: EntityManager, id: string, output: StoredOutput) {
  const result = await endJob(em, id, async (tx, job) => {
    const outcome = await settle(tx, job.hold_id, BigInt(job.price_micro));
    if (outcome.status === 'released') {
      await markEnded(tx, id, 'failed', { message: 'The reservation expired before the job finished. It was refunded in full.', code: 'reservation_expired' });
      return 'failed';
    }
    await tx.execute(
      `update generations set status = 'succeeded', cost_micro = ?::bigint, output = ?::jsonb, completed_at = now(),
         output_expires_at = now() + interval '1 hour'
       where id = ?`,
      [outcome.captured.toString(), JSON.stringify(output), id],
    );
    return 'succeeded';
  });
  const status = 'ended' in result ? result.ended.status : result.done;
  // A result that will never be served (the job ended otherwise) is not kept.
  if (status !== 'succeeded') await deps.storage.delete(output.key);
  return { status };
}

/** Releases the hold in full and marks the job failed with its error. */
export async function failJob(em: EntityManager, id: string, error: JobError) {
  await endJob(em, id, async (tx, job) => {
    await release(tx, job.hold_id);
    await markEnded(tx, id, 'failed', error);
  });
}

/**
 * POST /generations/{id}/cancel: a job not yet finished ends canceled and refunded in full;
 * a finished one answers 409 and keeps its state. Returns the job as it now is.
 */
export async function cancelJob(em: EntityManager, id: string): Promise<JobRow> {
  const result = await endJob(em, id, async (tx, job) => {
    await release(tx, job.hold_id);
    await markEnded(tx, id, 'canceled', null);
  });
  if ('ended' in result) {
    throw new CoreError('conflict', `The generation ${id} has already ended (${result.ended.status}); it cannot be canceled.`, { reason: 'generation_finished' });
  }
  return loadJob(em, id);
}

async function markEnded(tx: EntityManager, id: string, status: 'failed' | 'canceled', error: JobError | null) {
  await tx.execute(`update generations set status = ?, cost_micro = 0, error = ?::jsonb, completed_at = now() where id = ?`, [
    status,
    error ? JSON.stringify(error) : null,
    id,
  ]);
}

/** After the retention period, the stored result is deleted; the job keeps its record. */
export async function deleteJobResult(deps: CoreDeps, em: EntityManager, id: string) {
  const job = await loadJob(em, id);
  if (!job.output || job.output.deleted) return;
  await deps.storage.delete(job.output.key);
  await em.execute(`update generations set output = output || '{"deleted": true}'::jsonb where id = ?`, [id]);
}

/** Jobs still queued a while after they were accepted: their workflow may never have started. */
export async function staleQueuedJobs(em: EntityManager, olderThanSeconds: number): Promise<string[]> {
  const rows = await em.execute<{ id: string }[]>(
    `select id from generations where status = 'queued' and created_at < now() - make_interval(secs => ?) order by created_at limit 500`,
    [olderThanSeconds],
  );
  return rows.map((r) => r.id);
}

/** The result bytes behind a signed link. */
export async function readJobOutput(deps: CoreDeps, em: EntityManager, id: string, expires: unknown, signature: unknown) {
  deps.signer.verify(id, expires, signature, deps.clock());
  const job = await loadJob(em, id).catch(() => undefined);
  const output = job?.status === 'succeeded' ? job.output : null;
  const bytes = output && !output.deleted ? await deps.storage.get(output.key) : undefined;
  if (!output || !bytes) throw notFound('output_not_found', 'This result is no longer stored.');
  return { bytes, mimeType: output.mime_type, filename: output.filename };
}
