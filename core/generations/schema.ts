import { z } from 'zod';

export const createGenerationSchema = z.object({
  model: z.string().min(1),
  prompt: z.string().max(20_000).default(''),
  settings: z.record(z.string(), z.unknown()).default({}),
  inputs: z.record(z.string(), z.unknown()).default({}),
});
export type CreateGenerationInput = z.output<typeof createGenerationSchema>;

export const generationIdInput = z.object({ id: z.string().min(1).max(100) });

export const GENERATION_STATUSES = ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const;
export type GenerationStatus = (typeof GENERATION_STATUSES)[number];
