import { z } from 'zod';
import { idempotencyKeySchema } from '../idempotency.ts';

export const createGenerationSchema = z.object({
  model: z.string().min(1),
  prompt: z.string().max(20_000).default(''),
  settings: z.record(z.string(), z.unknown()).default({}),
  inputs: z.record(z.string(), z.unknown()).default({}),
  /** Called with the job when it ends (docs/generations.md#webhooks). */
  webhook_url: z.string().max(2000).optional(),
});
export type CreateGenerationInput = z.output<typeof createGenerationSchema>;

/** What the transport adds to the body: the Idempotency-Key and Prefer: wait=N headers. */
export const createGenerationCall = z.object({
  body: createGenerationSchema,
  idempotency_key: idempotencyKeySchema.optional(),
  /** Answer with the finished job if it ends within this many seconds (at most 60). */
  wait_seconds: z.number().int().min(0).max(60, 'wait is at most 60 seconds').optional(),
});

export const generationIdInput = z.object({ id: z.string().min(1).max(100) });

