import { z } from 'zod';
import { coinsToJson } from '../money/coins.ts';
import { applyPercent, defaults, mediaFromPrice, textPrices } from './pricing.ts';
import type { ModelDefinition } from './schema.ts';

/** Unix seconds of the catalog's epoch: the OpenAI model object wants a `created` number. */
const CREATED = 1_795_305_600;

/** A model as every adapter shows it (docs/catalog.md). */
export const modelViewSchema = z
  .object({
    id: z.string(),
    object: z.literal('model'),
    created: z.number().int(),
    owned_by: z.string(),
    name: z.string(),
    description: z.string(),
    type: z.enum(['text', 'image', 'video', 'audio', '3d']),
    generation_types: z.array(z.string()),
    paid_only: z.boolean(),
    pricing: z.record(z.string(), z.unknown()).describe('API prices in coins: per million tokens (text) or per job with `from` (media)'),
    settings: z.record(z.string(), z.record(z.string(), z.unknown())),
    inputs: z.record(z.string(), z.record(z.string(), z.unknown())),
    context_window: z.number().int().optional(),
    max_output_tokens: z.number().int().optional(),
    default_max_tokens: z.number().int().optional(),
    supported_parameters: z
      .array(z.string())
      .optional()
      .describe('text models: the request parameters the model takes, by OpenRouter\'s names; a request using another gets 400'),
    deadline_seconds: z.number().int().optional(),
    expected_seconds: z.number().int().optional().describe('media models: how long a job usually takes, when the operator knows'),
    example: z.record(z.string(), z.unknown()).optional().describe('a ready request (single-model answers only)'),
  })
  .strict();

/**
 * A model as the API shows it: the OpenAI model object (`id`, `object`, `created`, `owned_by`)
 * plus the spec's fields, with every price already at the API percentage.
 */
export function modelView(m: ModelDefinition, apiPricePercent: bigint, opts: { withExample?: boolean } = {}) {
  const base = {
    id: m.id,
    object: 'model' as const,
    created: CREATED,
    owned_by: m.id.includes('/') ? m.id.split('/')[0]! : 'mas',
    name: m.name,
    description: m.description,
    type: m.type,
    generation_types: m.generation_types,
    paid_only: m.paid_only,
    pricing: pricingView(m, apiPricePercent),
    settings: m.settings,
    inputs: m.inputs,
    ...(m.type === 'text'
      ? { context_window: m.context_window, max_output_tokens: m.max_output_tokens, default_max_tokens: m.default_max_tokens, supported_parameters: m.supported_parameters }
      : { deadline_seconds: m.deadline_seconds, ...(m.expected_seconds === undefined ? {} : { expected_seconds: m.expected_seconds }) }),
  };
  return opts.withExample ? { ...base, example: m.example ?? defaultExample(m) } : base;
}

function pricingView(m: ModelDefinition, percent: bigint) {
  if (m.type === 'text') {
    const p = textPrices(m, percent);
    return { currency: 'coins', unit: 'per_million_tokens', input: coinsToJson(p.inputPerMillion), output: coinsToJson(p.outputPerMillion) };
  }
  const p = m.pricing;
  return {
    currency: 'coins',
    unit: 'per_generation',
    from: coinsToJson(mediaFromPrice(m, percent)),
    base: coinsToJson(applyPercent(p.base, percent)),
    per_unit: Object.fromEntries(Object.entries(p.per_unit).map(([k, v]) => [k, coinsToJson(applyPercent(v, percent))])),
    multiply_by: p.multiply_by,
    factors: Object.fromEntries(Object.entries(p.factors).map(([k, t]) => [k, Object.fromEntries(Object.entries(t).map(([o, f]) => [o, coinsToJson(f)]))])),
  };
}

function defaultExample(m: ModelDefinition): Record<string, unknown> {
  if (m.type === 'text') {
    return { model: m.id, messages: [{ role: 'user', content: 'Write a haiku about the sea.' }], max_tokens: Math.min(64, m.max_output_tokens) };
  }
  return { model: m.id, prompt: 'A red fox in fresh snow, morning light', settings: defaults(m) };
}
