import { extendZodWithOpenApi, OpenAPIRegistry, OpenApiGeneratorV31, type RouteConfig } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { modelTypeFilter } from '../../core/catalog/catalog.ts';
import { chatRequestSchema } from '../../core/chat/schema.ts';
import { createGenerationSchema } from '../../core/generations/schema.ts';
import { historyInput } from '../../core/money/ledger.ts';

/**
 * The OpenAPI 3.1 document of the REST API, served at /api/v1/openapi.json. Request bodies and
 * query parameters are the very zod schemas core validates with; responses are described here,
 * and a test validates real responses against them.
 */
extendZodWithOpenApi(z);

const coins = z.number().describe('coins, at most 6 decimals (1 USD = 1000 coins)');
const isoTime = z.string().describe('ISO 8601 time, UTC');

const ErrorBody = z
  .object({ error: z.object({ message: z.string(), type: z.string(), code: z.string() }).strict() })
  .strict()
  .openapi('Error');

const Balance = z
  .object({
    object: z.literal('balance'),
    coins,
    subscription_coins: coins,
    purchased_coins: coins,
    held_coins: coins,
    paid_account: z.boolean(),
  })
  .openapi('Balance');

const WalletEntry = z
  .object({
    id: z.string(),
    object: z.literal('wallet_entry'),
    type: z.enum(['topup', 'subscription_grant', 'reservation', 'capture', 'release']),
    description: z.string(),
    pocket: z.enum(['subscription', 'purchased', 'held']),
    amount_coins: z.number(),
    balance_after_coins: coins,
    reference: z.string(),
    created_at: isoTime,
  })
  .openapi('WalletEntry');

const Model = z
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
    deadline_seconds: z.number().int().optional(),
    example: z.record(z.string(), z.unknown()).optional(),
  })
  .openapi('Model');

const Usage = z.object({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
  cost_coins: coins.describe('the final charge, equal to the `API usage` ledger entry'),
});

const ChatCompletion = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.object({
        index: z.number().int(),
        message: z.object({ role: z.literal('assistant'), content: z.string(), refusal: z.null() }),
        logprobs: z.null(),
        finish_reason: z.string(),
      }),
    ),
    usage: Usage,
  })
  .openapi('ChatCompletion');

const Generation = z
  .object({
    id: z.string(),
    object: z.literal('generation'),
    status: z.enum(['queued', 'running', 'succeeded', 'failed', 'canceled']),
    model: z.string(),
    prompt: z.string(),
    settings: z.record(z.string(), z.unknown()),
    inputs: z.record(z.string(), z.union([z.string(), z.array(z.string())])),
    created_at: isoTime,
    started_at: isoTime.nullable(),
    completed_at: isoTime.nullable(),
    price_coins: coins,
    cost_coins: coins.nullable().describe('null until the job ends; 0 when it failed or was canceled'),
    output: z.object({ url: z.string(), expires_at: isoTime, mime_type: z.string(), bytes: z.number().int() }).nullable(),
    error: z.object({ message: z.string(), code: z.string() }).nullable(),
    webhook_url: z.string().nullable(),
  })
  .openapi('Generation');

const File = z
  .object({
    id: z.string(),
    object: z.literal('file'),
    type: z.enum(['image', 'video', 'audio', 'model', 'other']),
    url: z.string().describe('signed link, valid for one hour'),
    bytes: z.number().int(),
    mime_type: z.string(),
    filename: z.string(),
    created_at: isoTime,
  })
  .openapi('File');

const list = <T extends z.ZodTypeAny>(item: T) => z.object({ object: z.literal('list'), data: z.array(item) });

const json = (schema: z.ZodTypeAny, description: string) => ({ description, content: { 'application/json': { schema } } });
const errors = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((s) => [s, json(ErrorBody, ERROR_TEXT[s] ?? 'Error')])) as RouteConfig['responses'];
const ERROR_TEXT: Record<number, string> = {
  400: 'Invalid request; the message names the field',
  401: 'Missing, malformed, unknown or revoked key',
  402: 'Insufficient balance',
  403: 'The model needs a paid account, or a signed link expired or was tampered with',
  404: 'Unknown object, or another account’s',
  409: 'Conflict with the current state',
  413: 'Body or upload too large',
  422: 'Idempotency-Key reused with another body',
  429: 'Rate limit or concurrency limit; see Retry-After',
  500: 'Internal error',
  502: 'The model provider failed',
  503: 'A dependency is unavailable',
  504: 'The model provider timed out',
};
const common = [401, 429, 500, 503];
const idParam = (name: string) => z.object({ [name]: z.string() });

export function buildOpenApiDocument(publicBaseUrl: string) {
  const registry = new OpenAPIRegistry();
  const bearer = registry.registerComponent('securitySchemes', 'bearerAuth', {
    type: 'http',
    scheme: 'bearer',
    description: 'Authorization: Bearer <API key>. Keys are never accepted in the query string.',
  });
  const secured = [{ [bearer.name]: [] }];
  const path = (config: RouteConfig) => registry.registerPath({ security: secured, ...config });

  path({ method: 'get', path: '/balance', summary: 'The wallet balance', responses: { 200: json(Balance, 'The balance'), ...errors(...common) } });
  path({
    method: 'get',
    path: '/wallet/history',
    summary: 'The ledger, newest first',
    request: { query: historyInput },
    responses: { 200: json(list(WalletEntry).extend({ has_more: z.boolean() }), 'A page of entries'), ...errors(400, ...common) },
  });
  path({ method: 'get', path: '/models', summary: 'The models', request: { query: modelTypeFilter }, responses: { 200: json(list(Model), 'Models'), ...errors(400, ...common) } });
  path({
    method: 'get',
    path: '/models/{id}',
    summary: 'One model, with an example request (ids may contain "/")',
    request: { params: idParam('id') },
    responses: { 200: json(Model, 'The model'), ...errors(404, ...common) },
  });
  path({
    method: 'post',
    path: '/chat/completions',
    summary: 'A chat completion (OpenAI format), billed on real usage',
    request: { body: { content: { 'application/json': { schema: chatRequestSchema } } } },
    responses: {
      200: {
        description: 'The completion; with `stream: true`, server-sent `chat.completion.chunk` events then `[DONE]`',
        content: { 'application/json': { schema: ChatCompletion }, 'text/event-stream': { schema: z.string() } },
      },
      ...errors(400, 402, 403, 404, 413, 502, 504, ...common),
    },
  });
  const wait = z.object({
    'Idempotency-Key': z.string().optional().describe('Same key and body: the first response, one job (kept 24 hours)'),
    Prefer: z.string().optional().describe('wait=N (N ≤ 60): answer with the finished job if it ends within N seconds'),
  });
  path({
    method: 'post',
    path: '/generations',
    summary: 'Start a media job',
    request: { headers: wait, body: { content: { 'application/json': { schema: createGenerationSchema } } } },
    responses: { 200: json(Generation, 'Finished within Prefer: wait'), 202: json(Generation, 'The job, queued'), ...errors(400, 402, 403, 404, 422, ...common) },
  });
  path({ method: 'get', path: '/generations/{id}', summary: 'A job', request: { params: idParam('id') }, responses: { 200: json(Generation, 'The job'), ...errors(404, ...common) } });
  path({
    method: 'post',
    path: '/generations/{id}/cancel',
    summary: 'Cancel a job not yet finished (refunded in full)',
    request: { params: idParam('id') },
    responses: { 200: json(Generation, 'The canceled job'), ...errors(404, 409, ...common) },
  });
  registry.registerPath({
    method: 'get',
    path: '/generations/{id}/output',
    summary: 'A job’s result, through its signed link (no API key)',
    security: [],
    request: { params: idParam('id'), query: z.object({ expires: z.string(), signature: z.string() }) },
    responses: { 200: { description: 'The file' }, ...errors(403, 404, 500) },
  });
  path({
    method: 'post',
    path: '/files',
    summary: 'Upload a file (multipart field `file`, at most 50 MB)',
    request: {
      headers: wait.pick({ 'Idempotency-Key': true }),
      body: { content: { 'multipart/form-data': { schema: z.object({ file: z.string().describe('the file (binary)') }) } } },
    },
    responses: { 200: json(File, 'The file'), ...errors(400, 413, 422, ...common) },
  });
  path({ method: 'get', path: '/files/{id}', summary: 'A file, with a fresh signed link', request: { params: idParam('id') }, responses: { 200: json(File, 'The file'), ...errors(404, ...common) } });
  registry.registerPath({
    method: 'get',
    path: '/files/{id}/content',
    summary: 'A file’s bytes, through its signed link (no API key)',
    security: [],
    request: { params: idParam('id'), query: z.object({ expires: z.string(), signature: z.string() }) },
    responses: { 200: { description: 'The file' }, ...errors(403, 404, 500) },
  });
  path({
    method: 'get',
    path: '/webhook_secret',
    summary: 'The secret that signs this account’s webhooks',
    responses: { 200: json(z.object({ object: z.literal('webhook_secret'), secret: z.string() }), 'The secret'), ...errors(...common) },
  });
  registry.registerPath({ method: 'get', path: '/openapi.json', summary: 'This document', security: [], responses: { 200: { description: 'OpenAPI 3.1' } } });
  registry.registerPath({ method: 'get', path: '/docs', summary: 'A readable reference of this document', security: [], responses: { 200: { description: 'HTML' } } });

  return new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Model Access Service',
      version: '1.0.0',
      description: 'Paid access to text, image, video, audio and 3D models. Every call is paid in coins from the wallet of the key’s account.',
    },
    servers: [{ url: `${publicBaseUrl}/api/v1` }],
    security: secured,
  });
}
