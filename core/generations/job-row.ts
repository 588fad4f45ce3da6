import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import type { JobWorkflowStart } from '../ports.ts';

/** A job as stored in `generations` (docs/generations.md). */
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
  /** The Temporal run id of its workflow, once started. */
  workflow_run_id?: string | null;
  /** The route that took the job (its provider and the model's name there), once submitted. */
  provider?: string | null;
  route_model?: string | null;
  /** The upstream's id of the job: for the operator and the upstream cancel, never the customer. */
  upstream_handle?: string | null;
  /** What the job cost upstream, in micro-coins, once it succeeded (null when unknown). */
  upstream_cost_micro?: string | null;
  /** The OpenTelemetry trace id of the request that submitted it, when tracing was on (docs/observability.md). */
  trace_id?: string | null;
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

export const isEnded = (status: string) => status !== 'queued' && status !== 'running';

export async function loadJob(em: EntityManager, id: string): Promise<JobRow> {
  const [row] = await em.execute<JobRow[]>('select *, price_micro::text, cost_micro::text, upstream_cost_micro::text from generations where id = ?', [id]);
  if (!row) throw notFound('generation_not_found', `No generation ${id}.`);
  return row;
}

/** The account's own job; another account's job is as unknown as a missing one. */
export async function loadOwnJob(em: EntityManager, accountId: string, id: string): Promise<JobRow> {
  const job = await loadJob(em, id).catch(() => undefined);
  if (!job || job.account_id !== accountId) throw notFound('generation_not_found', `No generation ${id}.`);
  return job;
}

/** Keeps the run id of a job's workflow, for the admin API's Temporal links (the first start's). */
export async function recordRunId(em: EntityManager, id: string, runId: string | void): Promise<void> {
  if (runId) await em.execute('update generations set workflow_run_id = ? where id = ? and workflow_run_id is null', [runId, id]);
}

/**
 * What the job's workflow is started with. The workflow engine shows it to operators (its
 * summary and search attributes), so the prompt is cut to its head: the rest may be private.
 */
export function jobWorkflowStart(job: Pick<JobRow, 'id' | 'account_id' | 'key_id' | 'model_id' | 'price_micro' | 'prompt'>, modelType: string): JobWorkflowStart {
  return {
    jobId: job.id,
    accountId: job.account_id,
    keyId: job.key_id,
    model: job.model_id,
    modelType,
    priceMicro: BigInt(job.price_micro),
    promptHead: promptHead(job.prompt),
  };
}

/** The first words of a prompt, at most 40 characters on one line. */
export function promptHead(prompt: string, max = 40): string {
  const line = prompt.replace(/\s+/g, ' ').trim();
  if (line.length <= max) return line;
  const cut = line.slice(0, max);
  const word = cut.lastIndexOf(' ');
  return `${(word > max / 2 ? cut.slice(0, word) : cut).trimEnd()}…`;
}
