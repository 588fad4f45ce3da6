import { z } from 'zod';
import { idempotencyKeySchema } from '../idempotency.ts';
import { jsonRecord } from '../json-record.ts';

/** The most a call may wait for its job to end (REST: `Prefer: wait=N`). */
export const MAX_WAIT_SECONDS = 60;

export const generationRequestSchema = z.object({
  model: z.string().min(1).max(200),
  prompt: z.string().max(20_000).default(''),
  settings: jsonRecord(z.unknown()).default({}),
  inputs: jsonRecord(z.unknown()).default({}),
  /** Called with the job when it ends (docs/generations.md#webhooks). */
  webhook_url: z.string().max(2000).optional(),
});

/** A generation request, with how the caller wants it handled: at most once per key, and how long to wait. */
export const createGenerationInput = generationRequestSchema.extend({
  /** The same key and request from the same account start one job (Stripe's idempotency keys). */
  idempotency_key: idempotencyKeySchema.optional(),
  /** Answer with the ended job if it ends within this many seconds. */
  wait_seconds: z.number().int().min(0).max(MAX_WAIT_SECONDS, `wait is at most ${MAX_WAIT_SECONDS} seconds`).optional(),
});
export type CreateGenerationInput = z.output<typeof createGenerationInput>;

export const generationIdInput = z.object({ id: z.string().min(1).max(100) });

