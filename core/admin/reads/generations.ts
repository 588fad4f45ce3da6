import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { JobRow } from '../../generations/job-row.ts';
import { generationView } from '../../generations/views.ts';
import { coinsToJson } from '../../money/coins.ts';
import type { UrlSigner } from '../../ports.ts';
import { accountId } from './accounts.ts';
import { keyId } from './keys.ts';
import { checkCursor, Conditions, idsInput, pageInput, pageOf, prefixedId, textArray, timeRangeInput } from './paging.ts';

export const generationId = prefixedId('gen');

export const generationListInput = pageInput.merge(timeRangeInput).extend({
  account: accountId.optional(),
  key: keyId.optional(),
  model: z.string().trim().min(1).max(200).optional(),
  status: z.enum(['queued', 'running', 'succeeded', 'failed', 'canceled']).optional(),
  after: generationId.optional(),
});

export const generationIdsInput = idsInput(generationId);

/**
 * The job as its account sees it (docs/generations.md, with a fresh signed result link), and
 * what operators also need: its account, key and hold, and its Temporal workflow. The workflow
 * id is the job id (config/temporal.ts starts it so); the run id is not stored, so it is null:
 * Temporal's UI opens the latest run of a workflow id.
 */
function view(job: JobRow, signer: UrlSigner) {
  return {
    ...generationView(job, signer),
    account: job.account_id,
    key: job.key_id,
    hold_id: job.hold_id,
    workflow_id: job.id,
    run_id: job.workflow_run_id ?? null,
    // The route that took the job and its upstream cost (the upstream's handle stays in the database).
    provider: job.provider ?? null,
    route_model: job.route_model ?? null,
    upstream_cost_coins: job.upstream_cost_micro != null ? coinsToJson(BigInt(job.upstream_cost_micro)) : null,
    // The OpenTelemetry trace of its submit, workflow and activities (docs/observability.md); null when not traced.
    trace_id: job.trace_id ?? null,
  };
}
export type AdminGenerationView = ReturnType<typeof view>;

const SELECT = 'select g.*, g.price_micro::text, g.cost_micro::text, g.upstream_cost_micro::text from generations g';

/** Jobs of every account (or one), newest first, filtered. */
export async function listAdminGenerations(deps: { signer: UrlSigner }, em: EntityManager, input: z.output<typeof generationListInput>) {
  const where = new Conditions().range('g.created_at', input).after('g', 'generations', input.after);
  where.addIf(input.account, 'g.account_id = ?').addIf(input.key, 'g.key_id = ?').addIf(input.model, 'g.model_id = ?').addIf(input.status, 'g.status = ?');
  const rows = await em.execute<JobRow[]>(`${SELECT} ${where.sql()} order by g.created_at desc, g.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'generations', input.after, rows);
  return pageOf(
    rows.map((job) => view(job, deps.signer)),
    input.first,
  );
}

/** The jobs with these ids, in one query; unknown ids are left out. */
export async function generationsByIds(deps: { signer: UrlSigner }, em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<JobRow[]>(`${SELECT} where g.id = any(?::text[])`, [textArray(ids)]);
  return { object: 'list' as const, data: rows.map((job) => view(job, deps.signer)) };
}
