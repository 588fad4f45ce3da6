import { z } from 'zod';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { coinsToJson } from '../money/coins.ts';
import type { UrlSigner } from '../ports.ts';
import { isEnded, type JobRow } from './job-row.ts';

/** The job object (docs/generations.md), as every adapter returns it. */
export const generationSchema = z
  .object({
    id: z.string(),
    object: z.literal('generation'),
    status: z.enum(['queued', 'running', 'succeeded', 'failed', 'canceled']),
    model: z.string(),
    prompt: z.string(),
    settings: z.record(z.string(), z.unknown()),
    inputs: z.record(z.string(), z.union([z.string(), z.array(z.string())])),
    created_at: isoTimeSchema,
    started_at: isoTimeSchema.nullable(),
    completed_at: isoTimeSchema.nullable(),
    price_coins: coinsSchema.describe('reserved when the job was accepted'),
    cost_coins: coinsSchema.nullable().describe('the final charge, once the job has ended (0 when failed or canceled)'),
    output: z
      .object({
        url: z.string().describe('signed link to the result, valid until expires_at (the retention period, RESULT_RETENTION_SECONDS: an hour by default)'),
        expires_at: isoTimeSchema,
        mime_type: z.string(),
        bytes: z.number().int(),
      })
      .strict()
      .nullable(),
    error: z.object({ message: z.string(), code: z.string() }).strict().nullable(),
    webhook_url: z.string().nullable(),
  })
  .strict();
export type GenerationView = z.infer<typeof generationSchema>;

export function generationView(job: JobRow, signer: UrlSigner): GenerationView {
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
    object: 'generation',
    status: job.status as GenerationView['status'],
    model: job.model_id,
    prompt: job.prompt,
    settings: job.settings,
    inputs: job.inputs,
    created_at: new Date(job.created_at).toISOString(),
    started_at: job.started_at ? new Date(job.started_at).toISOString() : null,
    completed_at: job.completed_at ? new Date(job.completed_at).toISOString() : null,
    price_coins: coinsToJson(BigInt(job.price_micro)),
    cost_coins: isEnded(job.status) ? coinsToJson(BigInt(job.cost_micro ?? '0')) : null,
    output,
    error: job.error,
    webhook_url: job.webhook_url,
  };
}
