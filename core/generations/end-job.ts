import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import { release, settle } from '../money/holds.ts';
import type { ResultStorage } from '../ports.ts';
import { isEnded, loadJob, type JobError, type JobRow, type StoredOutput } from './job-row.ts';
import { RESERVATION_EXPIRED } from './upstream.ts';

/**
 * The endings of a job: succeeded, failed or canceled. Every ending runs in one transaction
 * holding the job's row lock, ends the hold inside it and moves the status only from queued
 * or running, so completion, failure and cancellation racing each other produce exactly one
 * outcome, and the money always matches the status.
 */
export async function endJob<T>(em: EntityManager, id: string, fn: (tx: EntityManager, job: JobRow) => Promise<T>): Promise<{ ended: JobRow } | { done: T }> {
  return em.transactional(async (tx) => {
    const [locked] = await tx.execute<{ status: string }[]>('select status from generations where id = ? for update', [id]);
    if (!locked) throw notFound('generation_not_found', `No generation ${id}.`);
    const job = await loadJob(tx, id);
    if (isEnded(job.status)) return { ended: job };
    return { done: await fn(tx, job) };
  });
}

/**
 * Settles the hold at the job's price and marks it succeeded, its link valid for an hour.
 * If the hold was already released (the sweep found it expired), the job ends failed and
 * refunded instead: a job is never delivered unpaid, nor paid twice.
 */
export async function completeJob(deps: { storage: ResultStorage; config: { resultRetentionSeconds: number } }, em: EntityManager, id: string, output: StoredOutput): Promise<JobEnding> {
  const result = await endJob(em, id, async (tx, job): Promise<JobEnding> => {
    const outcome = await settle(tx, job.hold_id, BigInt(job.price_micro));
    if (outcome.status === 'released') {
      const error = { message: RESERVATION_EXPIRED, code: 'reservation_expired' };
      await markEnded(tx, id, 'failed', error);
      return { status: 'failed', error };
    }
    // The result is kept for the retention period (its link expires then); the retention schedule deletes it.
    await tx.execute(
      `update generations set status = 'succeeded', cost_micro = ?::bigint, output = ?::jsonb, completed_at = now(),
         output_expires_at = now() + make_interval(secs => ?)
       where id = ?`,
      [outcome.captured.toString(), JSON.stringify(output), deps.config.resultRetentionSeconds, id],
    );
    return { status: 'succeeded', error: null };
  });
  const ending = 'ended' in result ? endingOf(result.ended) : result.done;
  // A result that will never be served (the job ended otherwise) is not kept.
  if (ending.status !== 'succeeded') await deps.storage.delete(output.key);
  return ending;
}

/** Releases the hold in full and marks the job failed with its error; answers how the job ended (it may have ended otherwise first). */
export async function failJob(em: EntityManager, id: string, error: JobError): Promise<JobEnding> {
  const result = await endJob(em, id, async (tx, job): Promise<JobEnding> => {
    await release(tx, job.hold_id);
    await markEnded(tx, id, 'failed', error);
    return { status: 'failed', error };
  });
  return 'ended' in result ? endingOf(result.ended) : result.done;
}

/**
 * Releases the hold in full and marks the job canceled: a cancel through the API, or a cancel
 * request an operator sent the job's workflow from the Temporal UI. Answers how the job ended.
 */
export async function cancelJob(em: EntityManager, id: string): Promise<{ ending: JobEnding; canceledNow: boolean }> {
  const result = await endJob(em, id, async (tx, job): Promise<JobEnding> => {
    await release(tx, job.hold_id);
    await markEnded(tx, id, 'canceled', null);
    return { status: 'canceled', error: null };
  });
  return 'ended' in result ? { ending: endingOf(result.ended), canceledNow: false } : { ending: result.done, canceledNow: true };
}

/** How a job ended: what its workflow closes with (Completed, Failed with the error, Canceled). */
export interface JobEnding {
  status: 'succeeded' | 'failed' | 'canceled';
  error: JobError | null;
}

export const endingOf = (job: Pick<JobRow, 'status' | 'error'>): JobEnding => ({ status: job.status as JobEnding['status'], error: job.error });

export async function markEnded(tx: EntityManager, id: string, status: 'failed' | 'canceled', error: JobError | null) {
  await tx.execute(`update generations set status = ?, cost_micro = 0, error = ?::jsonb, completed_at = now() where id = ?`, [
    status,
    error ? JSON.stringify(error) : null,
    id,
  ]);
}
