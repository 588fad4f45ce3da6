import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { historyInput } from '../money/history.ts';
import type { UrlSigner } from '../ports.ts';
import { loadOwnJob, type JobRow } from './job-row.ts';
import { generationSchema, generationView } from './views.ts';

/**
 * The account's jobs, newest first, paged like the wallet history: `starting_after` is the
 * last job id of the previous page; `status` keeps the jobs in that status only.
 */
export const listGenerationsInput = z.object({
  limit: historyInput.shape.limit,
  starting_after: z.string().regex(/^gen_[0-9A-Za-z]{1,64}$/, 'must be a generation id such as gen_…').optional(),
  status: generationSchema.shape.status.optional(),
});

export const generationListSchema = z.object({ object: z.literal('list'), data: z.array(generationSchema), has_more: z.boolean() }).strict();

/**
 * A page of the account's jobs (index generations_account). The cursor must be one of the
 * account's own jobs: another account's job id answers as an unknown one does.
 */
export async function listGenerations(deps: { signer: UrlSigner }, em: EntityManager, accountId: string, input: z.output<typeof listGenerationsInput>) {
  const after = input.starting_after ? await loadOwnJob(em, accountId, input.starting_after) : null;
  const where = ['account_id = ?'];
  const params: unknown[] = [accountId];
  if (after) {
    where.push('(created_at, id) < (?::timestamptz, ?)');
    params.push(after.created_at, after.id);
  }
  if (input.status) {
    where.push('status = ?');
    params.push(input.status);
  }
  const rows = await em.execute<JobRow[]>(
    `select *, price_micro::text, cost_micro::text from generations where ${where.join(' and ')} order by created_at desc, id desc limit ?`,
    [...params, input.limit + 1],
  );
  return {
    object: 'list' as const,
    data: rows.slice(0, input.limit).map((job) => generationView(job, deps.signer)),
    has_more: rows.length > input.limit,
  };
}
