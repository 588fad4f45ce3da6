import { coinsToJson } from '../money/coins.ts';
import type { JobRow } from './lifecycle.ts';
import type { UrlSigner } from './signed-url.ts';

/** The job object (docs/generations.md): statuses queued, running, succeeded, failed, canceled. */
export function generationView(job: JobRow, signer: UrlSigner) {
  const ended = job.status !== 'queued' && job.status !== 'running';
  const output =
    job.status === 'succeeded' && job.output && job.output_expires_at
      ? {
          url: signer.sign(job.id, new Date(job.output_expires_at)),
          expires_at: new Date(job.output_expires_at).toISOString(),
          mime_type: job.output.mime_type,
          bytes: job.output.bytes,
        }
      : null;
  return {
    id: job.id,
    object: 'generation' as const,
    status: job.status,
    model: job.model_id,
    prompt: job.prompt,
    settings: job.settings,
    inputs: job.inputs,
    created_at: new Date(job.created_at).toISOString(),
    started_at: job.started_at ? new Date(job.started_at).toISOString() : null,
    completed_at: job.completed_at ? new Date(job.completed_at).toISOString() : null,
    price_coins: coinsToJson(BigInt(job.price_micro)),
    cost_coins: ended ? coinsToJson(BigInt(job.cost_micro ?? '0')) : null,
    output,
    error: job.error,
    webhook_url: job.webhook_url,
  };
}
