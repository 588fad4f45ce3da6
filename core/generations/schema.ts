import { z } from 'zod';
import { idempotencyKeySchema } from '../idempotency.ts';
import { jsonRecord } from '../json-record.ts';

/** The most a call may wait for its job to end (REST: `Prefer: wait=N`). */
export const MAX_WAIT_SECONDS = 60;

/**
 * Text a job keeps (its prompt, its webhook URL, a string setting) may not hold U+0000, which
 * PostgreSQL stores in neither text nor JSONB: refused naming the field, and documented as a
 * `pattern` in the OpenAPI document. (Elsewhere a NUL that reaches the database is a 400 without
 * a field: core/trpc.ts.)
 */
// eslint-disable-next-line no-control-regex -- the point: no U+0000
const NO_NUL = /^[^\u0000]*$/;
const NO_NUL_MESSAGE = 'must not contain the NUL character (\\u0000)';

export const generationRequestSchema = z.object({
  model: z.string().min(1).max(200),
  prompt: z.string().max(20_000).regex(NO_NUL, NO_NUL_MESSAGE).default(''),
  settings: jsonRecord(z.unknown()).default({}),
  inputs: jsonRecord(z.unknown()).default({}),
  /** Called with the job when it ends (docs/generations.md#webhooks). */
  webhook_url: z.string().max(2000).regex(NO_NUL, NO_NUL_MESSAGE).optional(),
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

