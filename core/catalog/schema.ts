import { z } from 'zod';
import { jsonRecord } from '../json-record.ts';
import { parseCoins } from '../money/coins.ts';

/**
 * The catalog file's shape (config/models.yaml): providers, and models with their in-app
 * prices. Everything the API shows is derived from this by core/catalog/views.ts, and every
 * price by core/catalog/pricing.ts.
 */

/** A non-negative decimal with at most 6 decimals, as micro-units (coins or factors). */
export const decimal6 = z.union([z.string(), z.number()]).transform((v, ctx) => {
  try {
    return parseCoins(String(v));
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

export const MODEL_TYPES = ['text', 'image', 'video', 'audio', '3d'] as const;
export type ModelType = (typeof MODEL_TYPES)[number];
export const FILE_KINDS = ['image', 'video', 'audio', 'model'] as const;

const description = z.string().max(2000).optional();

/**
 * A numeric setting that is time the job takes (the local provider's `delay_ms`), in this unit:
 * the model's deadline bounds it (jobTimeLimit), at load and at submit.
 */
const jobTime = z.enum(['ms', 's']).optional();
/** Milliseconds per unit of a `job_time` setting. */
const JOB_TIME_MS = { ms: 1, s: 1000 } as const;

export const settingSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('enum'), options: z.array(z.union([z.string(), z.number()])).min(1), default: z.union([z.string(), z.number()]), description }),
  z.object({ type: z.literal('integer'), min: z.number().int(), max: z.number().int(), default: z.number().int(), job_time: jobTime, description }),
  z.object({ type: z.literal('number'), min: z.number(), max: z.number(), default: z.number(), job_time: jobTime, description }),
  z.object({ type: z.literal('boolean'), default: z.boolean(), description }),
  z.object({ type: z.literal('string'), max_length: z.number().int().positive().default(1000), default: z.string().optional(), description }),
]);
export type SettingSpec = z.output<typeof settingSchema>;

export const inputSchema = z.object({
  accepts: z.array(z.enum(FILE_KINDS)).min(1),
  multiple: z.boolean().default(false),
  required: z.boolean().default(false),
  description,
});

export const textPricingSchema = z.object({
  /** In-app coins per million input (prompt) tokens. */
  input_per_million: decimal6,
  /** In-app coins per million output (completion) tokens. */
  output_per_million: decimal6,
});

/**
 * Media price, in in-app coins: (base + Σ per_unit[k] × value(k)) × Π factors[k][value(k)] × Π value(m) for m in multiply_by.
 * For example per second of video (per_unit: {duration: 2}), per image (multiply_by: [num_images]),
 * per resolution step (factors: {resolution: {"720p": 1, "1080p": 2}}).
 */
export const mediaPricingSchema = z.object({
  base: decimal6,
  per_unit: jsonRecord(decimal6).default({}),
  multiply_by: z.array(z.string()).default([]),
  factors: jsonRecord(jsonRecord(decimal6)).default({}),
});

export const providerRouteSchema = z.object({
  /** A provider named in the catalog's `providers` section. */
  name: z.string().min(1),
  /** The model name the upstream knows. */
  model: z.string().min(1),
});

/**
 * One upstream that serves a model (docs/catalog.md, "Routes"): a provider of the catalog's
 * `providers` section and the model's name there. A model lists one or more; ordered routes
 * are tried in turn on a retryable failure, weighted ones are picked by weight first. `cost`
 * is what the upstream charges the operator, in coins (1 USD = 1000 coins) and in the
 * model's own pricing shape: the margin's cost when the upstream's answer reports none.
 */
const routeBase = {
  provider: z.string().min(1),
  model: z.string().min(1),
  /** The share of requests a weighted model sends here first (ordered models ignore it). */
  weight: z.number().int().min(1).max(1000).default(1),
};
export const textRouteSchema = z.object({ ...routeBase, cost: textPricingSchema.optional() });
export const mediaRouteSchema = z.object({ ...routeBase, cost: mediaPricingSchema.optional() });
export type TextRoute = z.output<typeof textRouteSchema>;
export type MediaRoute = z.output<typeof mediaRouteSchema>;
export type ModelRoute = TextRoute | MediaRoute;
/** How a model with several routes picks the first: in their order (fallback), or by weight. */
export const ROUTE_SELECTIONS = ['ordered', 'weighted'] as const;
export const MAX_ROUTES = 8;

const modelId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]*(\/[A-Za-z0-9][A-Za-z0-9._:-]*)*$/, 'letters, digits, . _ : - and / between parts')
  .max(200);

const baseModel = {
  id: modelId,
  name: z.string().min(1).max(200),
  description: z.string().max(4000).default(''),
  generation_types: z.array(z.string().min(1)).min(1),
  paid_only: z.boolean().default(false),
  /** The one upstream of a model with one route; a model with several lists `routes` instead (both: the first route is `provider`). */
  provider: providerRouteSchema.optional(),
  route_selection: z.enum(ROUTE_SELECTIONS).default('ordered'),
  settings: jsonRecord(settingSchema).default({}),
  inputs: jsonRecord(inputSchema).default({}),
  example: jsonRecord(z.unknown()).optional(),
};

/**
 * The request parameters a text model may be sent, by OpenRouter's names (its models'
 * `supported_parameters`). `max_tokens` stands for max_completion_tokens too;
 * `response_format` for json_object, `structured_outputs` for json_schema (which needs both).
 */
export const SUPPORTED_PARAMETERS = [
  'max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'presence_penalty', 'frequency_penalty',
  'tools', 'tool_choice', 'parallel_tool_calls', 'response_format', 'structured_outputs',
] as const;
export type SupportedParameter = (typeof SUPPORTED_PARAMETERS)[number];

/**
 * What a text model supports when its entry does not say: the sampling parameters every
 * OpenAI-compatible server takes, and no tools or structured outputs. A model stored before
 * `supported_parameters` existed keeps exactly what it was sent then, until `mas catalog sync`.
 */
export const DEFAULT_SUPPORTED_PARAMETERS: SupportedParameter[] = ['max_tokens', 'temperature', 'top_p', 'stop', 'seed', 'presence_penalty', 'frequency_penalty'];

export const textModelSchema = z.object({
  ...baseModel,
  type: z.literal('text'),
  pricing: textPricingSchema,
  context_window: z.number().int().positive(),
  max_output_tokens: z.number().int().positive(),
  /** The output limit reserved for when a request names none. */
  default_max_tokens: z.number().int().positive(),
  routes: z.array(textRouteSchema).min(1).max(MAX_ROUTES).optional(),
  supported_parameters: z
    .array(z.enum(SUPPORTED_PARAMETERS))
    .default(() => [...DEFAULT_SUPPORTED_PARAMETERS])
    .refine((p) => !p.includes('structured_outputs') || p.includes('response_format'), 'structured_outputs needs response_format'),
});

export const mediaModelSchema = z.object({
  ...baseModel,
  type: z.enum(['image', 'video', 'audio', '3d']),
  pricing: mediaPricingSchema,
  /** How long a job may take before it fails and is refunded. */
  deadline_seconds: z.number().int().positive().default(600),
  /**
   * How long a job usually takes, when the operator knows (optional): MCP `generate` reports
   * its progress against it. Absent, clients are sent no total (an indeterminate bar).
   */
  expected_seconds: z.number().int().positive().optional(),
  routes: z.array(mediaRouteSchema).min(1).max(MAX_ROUTES).optional(),
});

export const modelSchema = z.discriminatedUnion('type', [textModelSchema, mediaModelSchema]).superRefine((m, ctx) => {
  routeProblems(m, ctx);
  if (m.type === 'text' && m.default_max_tokens > m.max_output_tokens) {
    ctx.addIssue({ code: 'custom', path: ['default_max_tokens'], message: 'must not exceed max_output_tokens' });
  }
  if (m.type !== 'text' && m.expected_seconds !== undefined && m.expected_seconds > m.deadline_seconds) {
    ctx.addIssue({ code: 'custom', path: ['expected_seconds'], message: `must not exceed deadline_seconds (${m.deadline_seconds})` });
  }
  for (const [key, s] of Object.entries(m.settings)) {
    const bad = settingDefaultProblem(s);
    if (bad) ctx.addIssue({ code: 'custom', path: ['settings', key, 'default'], message: bad });
  }
  if (m.type !== 'text') {
    const referenced = [...Object.keys(m.pricing.per_unit), ...m.pricing.multiply_by, ...Object.keys(m.pricing.factors)];
    for (const key of referenced) {
      const s = Object.hasOwn(m.settings, key) ? m.settings[key] : undefined;
      if (!s) ctx.addIssue({ code: 'custom', path: ['pricing'], message: `prices by setting "${key}", which the model does not have` });
      else if (Object.hasOwn(m.pricing.factors, key) && s.type !== 'enum' && s.type !== 'boolean') {
        ctx.addIssue({ code: 'custom', path: ['pricing', 'factors', key], message: 'factors need an enum or boolean setting' });
      } else if (Object.hasOwn(m.pricing.factors, key)) {
        const options = s.type === 'enum' ? s.options.map(String) : ['true', 'false'];
        for (const option of options) {
          if (!Object.hasOwn(m.pricing.factors[key]!, option)) ctx.addIssue({ code: 'custom', path: ['pricing', 'factors', key], message: `no factor for option "${option}"` });
        }
      } else if (s.type !== 'integer' && s.type !== 'number' && !(s.type === 'enum' && s.options.every((o) => typeof o === 'number'))) {
        ctx.addIssue({ code: 'custom', path: ['pricing'], message: `setting "${key}" must be numeric to price by its value` });
      } else if ((s.type === 'enum' ? Math.min(...(s.options as number[])) : (s as { min: number }).min) < 0) {
        // A price grows with the value; a negative value would price below zero.
        ctx.addIssue({ code: 'custom', path: ['settings', key], message: `setting "${key}" prices by its value, so it cannot go below 0` });
      }
    }
  }
}).transform(withRoutes);
export type ModelDefinition = z.output<typeof modelSchema>;
export type TextModel = Extract<ModelDefinition, { type: 'text' }>;
export type MediaModel = Exclude<ModelDefinition, { type: 'text' }>;

type ParsedModel = z.output<typeof textModelSchema> | z.output<typeof mediaModelSchema>;

/** A model names its upstream by `provider` (one route) or `routes`; when both, `provider` is the first route. */
function routeProblems(m: ParsedModel, ctx: z.RefinementCtx): void {
  if (!m.routes && !m.provider) {
    ctx.addIssue({ code: 'custom', path: ['provider'], message: 'a model needs a provider or routes' });
    return;
  }
  const first = m.routes?.[0];
  if (m.provider && first && (m.provider.name !== first.provider || m.provider.model !== first.model)) {
    ctx.addIssue({ code: 'custom', path: ['provider'], message: 'must be the first of routes when both are given (or leave it out)' });
  }
  const seen = new Set<string>();
  m.routes?.forEach((r, i) => {
    const key = routeKey(r);
    if (seen.has(key)) ctx.addIssue({ code: 'custom', path: ['routes', i], message: `duplicate route ${key}` });
    seen.add(key);
    if (m.type === 'text' || !r.cost) return;
    const cost = r.cost as z.output<typeof mediaPricingSchema>;
    for (const setting of [...Object.keys(cost.per_unit), ...cost.multiply_by, ...Object.keys(cost.factors)]) {
      if (!Object.hasOwn(m.settings, setting)) ctx.addIssue({ code: 'custom', path: ['routes', i, 'cost'], message: `costs by setting "${setting}", which the model does not have` });
    }
  });
}

/** The parsed model with both forms filled in: `routes` always (one for `provider:` alone), `provider` its first. */
function withRoutes<M extends ParsedModel>(m: M) {
  const routes = (m.routes ?? [{ provider: m.provider!.name, model: m.provider!.model, weight: 1 }]) as NonNullable<M['routes']>;
  const first = routes[0]!;
  return { ...m, routes, provider: { name: first.provider, model: first.model } };
}

/** A route's name in metrics, breakers and records: `provider/model`. */
export function routeKey(route: { provider: string; model: string }): string {
  return `${route.provider}/${route.model}`;
}

/**
 * For a setting that is time the job takes (`job_time`), the first value, in the setting's own
 * unit, that the model's deadline can never meet: a job that takes the whole deadline, or more,
 * always fails at it. Undefined for any other setting.
 */
export function jobTimeLimit(s: SettingSpec, deadlineSeconds: number): number | undefined {
  if ((s.type !== 'integer' && s.type !== 'number') || !s.job_time) return undefined;
  return (deadlineSeconds * 1000) / JOB_TIME_MS[s.job_time];
}

/**
 * A `job_time` setting whose `max` the model's deadline can never meet: every job asked for
 * near it would be accepted, reserved, and fail at the deadline. Checked where an entry comes
 * in (the catalog file, an operator's entry), not where a stored model is read: a model
 * stored before would otherwise vanish; its requests are checked instead (core/generations/validate.ts).
 */
export function jobTimeProblem(m: ModelDefinition): { path: PropertyKey[]; message: string } | undefined {
  if (m.type === 'text') return undefined;
  for (const [key, s] of Object.entries(m.settings)) {
    const limit = jobTimeLimit(s, m.deadline_seconds);
    if (limit === undefined || (s as { max: number }).max < limit) continue;
    return {
      path: ['settings', key, 'max'],
      message:
        `model '${m.id}': setting '${key}' goes up to ${jobSeconds(s, (s as { max: number }).max)} s of job time, which its deadline of ` +
        `${m.deadline_seconds} s (deadline_seconds) can never meet: its max must be below ${limit}`,
    };
  }
  return undefined;
}

/** A value of a `job_time` setting, in seconds. */
export function jobSeconds(s: SettingSpec, value: number): number {
  return s.type === 'integer' || s.type === 'number' ? (value * JOB_TIME_MS[s.job_time ?? 's']) / 1000 : value;
}

function settingDefaultProblem(s: SettingSpec): string | undefined {
  if (s.type === 'enum' && !s.options.includes(s.default)) return 'must be one of the options';
  if ((s.type === 'integer' || s.type === 'number') && (s.min > s.max || s.default < s.min || s.default > s.max)) {
    return 'must lie within min..max';
  }
  return undefined;
}

/**
 * A chat upstream's time limits beyond the transport's `timeout_seconds` (docs/catalog.md,
 * "Providers"), each optional: `chatTimeouts` fills the defaults. Only the answer counts as
 * progress, never an SSE comment (`: keep-alive`) or an Anthropic `ping`.
 */
const chatTimeoutFields = {
  /** Longest wait from the request to the answer's first event (text, a tool call, its end). Default: `timeout_seconds`. */
  first_token_timeout_seconds: z.number().positive().max(3600).optional(),
  /** Longest wait between two events of the answer once it began. Default: `timeout_seconds`. */
  idle_timeout_seconds: z.number().positive().max(3600).optional(),
  /** Longest a whole call may take, first byte to last event. Default: 600, or the first-token time-out when it is longer. */
  deadline_seconds: z.number().positive().max(3600).optional(),
};

/** The default deadline of a chat call: OpenAI's and Anthropic's SDKs wait 10 minutes for a request, and chat holds live 15 (HOLD_TTL_SECONDS). */
export const DEFAULT_CHAT_DEADLINE_SECONDS = 600;

/** A chat upstream's time limits with their defaults, in seconds. */
export function chatTimeouts(config: { timeout_seconds: number; first_token_timeout_seconds?: number | undefined; idle_timeout_seconds?: number | undefined; deadline_seconds?: number | undefined }) {
  const firstToken = config.first_token_timeout_seconds ?? config.timeout_seconds;
  return {
    firstToken,
    idle: config.idle_timeout_seconds ?? config.timeout_seconds,
    deadline: config.deadline_seconds ?? Math.max(DEFAULT_CHAT_DEADLINE_SECONDS, firstToken),
  };
}

export const providerConfigSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('local') }),
  z.object({
    kind: z.literal('openai-compatible'),
    base_url: z.url({ protocol: /^https?$/ }),
    /** The environment variable that holds the upstream key: keys never live in the file. */
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    /** Longest wait for the upstream's first byte, and between two streamed chunks. */
    timeout_seconds: z.number().positive().max(3600).default(120),
    ...chatTimeoutFields,
    headers: z.record(z.string(), z.string()).default({}),
  }),
  z.object({
    /** Anthropic's Messages API for chat (POST /v1/messages, docs/providers.md "Anthropic"). */
    kind: z.literal('anthropic'),
    base_url: z.url({ protocol: /^https?$/ }).default('https://api.anthropic.com'),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    /** Longest wait for the first byte, and between two streamed events. */
    timeout_seconds: z.number().positive().max(3600).default(120),
    ...chatTimeoutFields,
    anthropic_version: z.string().min(1).default('2023-06-01'),
  }),
  z.object({
    /** A Replicate-style predictions API (POST /predictions, GET /predictions/{id}, POST …/cancel). */
    kind: z.literal('replicate'),
    base_url: z.url({ protocol: /^https?$/ }),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    timeout_seconds: z.number().positive().max(600).default(30),
  }),
  z.object({
    /** fal.ai's queue API (POST /{model_id}, GET …/requests/{id}/status, GET …/requests/{id}, PUT …/cancel). */
    kind: z.literal('fal'),
    base_url: z.url({ protocol: /^https?$/ }).default('https://queue.fal.run'),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    /** Per HTTP call; the job's own limit is the model's deadline_seconds. */
    timeout_seconds: z.number().positive().max(600).default(30),
  }),
  z.object({
    /** OpenAI's media APIs: images (generations, edits), speech, videos (docs/providers.md). */
    kind: z.literal('openai'),
    base_url: z.url({ protocol: /^https?$/ }).default('https://api.openai.com/v1'),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    /** Longest wait for one upstream call (an image or a speech file is made within one). */
    timeout_seconds: z.number().positive().max(600).default(180),
    organization: z.string().min(1).optional(),
    project: z.string().min(1).optional(),
    /** A result (decoded image, speech, video download) larger than this is refused. */
    max_result_mb: z.number().int().positive().max(2048).default(512),
  }),
  z.object({
    /** ElevenLabs text-to-speech (POST /v1/text-to-speech/{voice_id}). */
    kind: z.literal('elevenlabs'),
    base_url: z.url({ protocol: /^https?$/ }).default('https://api.elevenlabs.io'),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
    timeout_seconds: z.number().positive().max(600).default(120),
    max_result_mb: z.number().int().positive().max(2048).default(64),
  }),
]);
export type ProviderConfig = z.output<typeof providerConfigSchema>;

export const catalogFileSchema = z
  .object({
    providers: z.record(z.string(), providerConfigSchema).default({}),
    models: z.array(modelSchema).default([]),
  })
  .superRefine((file, ctx) => {
    for (const [name, p] of Object.entries(file.providers)) {
      if (p.kind !== 'openai-compatible' && p.kind !== 'anthropic' || p.deadline_seconds === undefined) continue;
      // A wait longer than the whole call's deadline could never end it: a mistake in the file.
      for (const field of ['first_token_timeout_seconds', 'idle_timeout_seconds'] as const) {
        const wait = p[field];
        if (wait !== undefined && wait > p.deadline_seconds) {
          ctx.addIssue({ code: 'custom', path: ['providers', name, field], message: `must be at most deadline_seconds (${p.deadline_seconds})` });
        }
      }
    }
    const seen = new Set<string>();
    file.models.forEach((m, i) => {
      if (seen.has(m.id)) ctx.addIssue({ code: 'custom', path: ['models', i, 'id'], message: `duplicate model id ${m.id}` });
      seen.add(m.id);
      // A model that failed its own checks was not transformed: its routes may still be missing.
      const routes: readonly { provider: string }[] = m.routes ?? (m.provider ? [{ provider: m.provider.name }] : []);
      routes.forEach((r, j) => {
        if (!Object.hasOwn(file.providers, r.provider)) {
          ctx.addIssue({ code: 'custom', path: ['models', i, 'routes', j, 'provider'], message: `unknown provider "${r.provider}"` });
        }
      });
    });
  });
export type CatalogFile = z.output<typeof catalogFileSchema>;
