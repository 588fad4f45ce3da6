import { extendZodWithOpenApi, OpenAPIRegistry, OpenApiGeneratorV31, type RouteConfig } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';
import { modelTypeFilter } from '../../core/catalog/catalog.ts';
import { chatRequestSchema } from '../../core/chat/schema.ts';
import { generationRequestSchema } from '../../core/generations/schema.ts';
import { inputsDocument, settingsDocument, type DocumentedModel } from '../../core/generations/request-document.ts';
import { generationSchema } from '../../core/generations/views.ts';
import { listGenerationsInput } from '../../core/generations/list-generations.ts';
import { fileSchema } from '../../core/files/file-row.ts';
import { modelViewSchema } from '../../core/catalog/views.ts';
import { chatCompletionSchema } from '../../core/chat/views.ts';
import { completionRecordSchema } from '../../core/chat/records.ts';
import { responseSchema, responsesRequestSchema } from '../../core/chat/responses.ts';
import { balanceSchema } from '../../core/money/wallet.ts';
import { createdKeySchema, keyIdInput, keyInfoSchema, keySchema, updateKeyInput } from '../../core/keys/keys.ts';
import { createManagedKeyInput } from '../../core/organizations/managed-keys.ts';
import { createOrganizationInput, organizationIdInput, organizationSchema } from '../../core/organizations/organizations.ts';
import { memberRef, memberSchema, updateMemberInput } from '../../core/organizations/members.ts';
import { createInvitationInput, invitationRef, invitationSchema } from '../../core/organizations/invitations.ts';
import { idempotencyKeySchema } from '../../core/idempotency.ts';
import { historyInput, walletEntrySchema } from '../../core/money/history.ts';
import { checkoutSessionSchema, topUpCheckoutInput } from '../../core/payments/create-checkout.ts';
import { billingSchema, subscriptionCheckoutInput } from '../../core/payments/billing.ts';

/**
 * The OpenAPI 3.1 document of the REST API, served at /api/v1/openapi.json. Request bodies and
 * query parameters are the very zod schemas core validates with; responses are described here,
 * and a test validates real responses against them. What zod cannot carry into JSON Schema
 * (the chat request's refusals, made in a transform; zod's safe-integer range; JavaScript's
 * ASCII-only \d) is declared by `declareServerRules` below, so that a request the document
 * allows is one the server accepts, and the other way round (schemathesis checks both:
 * `npm run test:schema`).
 */
extendZodWithOpenApi(z);


const ErrorBody = z
  .object({
    error: z
      .object({
        message: z.string(),
        type: z.string(),
        param: z.string().nullable().describe('the request field the error is about, as a dotted path (`messages.0.content`); null when none is'),
        code: z.string(),
      })
      .strict(),
  })
  .strict()
  .openapi('Error');

/**
 * The response schemas are core's own output schemas (core/<area>/views.ts and beside), the
 * same that the MCP tools' output schemas use; each is copied into a schema made after
 * extendZodWithOpenApi so that it can carry a component name.
 */
const named = <T extends z.ZodRawShape>(schema: z.ZodObject<T>, name: string) => z.object(schema.shape).strict().openapi(name);

const Balance = named(balanceSchema, 'Balance');
const KeyInfo = named(keyInfoSchema, 'Key');
const WalletEntry = named(walletEntrySchema, 'WalletEntry');
const Model = named(modelViewSchema, 'Model');
const ChatCompletion = named(chatCompletionSchema, 'ChatCompletion');
const CompletionRecord = named(completionRecordSchema, 'CompletionRecord');
/** One server-sent event of a streamed completion (OpenAPI 3.1: `schema` describes each event of a stream). */
const ChatStreamEvent = z
  .object({
    event: z.string().optional(),
    id: z.string().optional(),
    data: z.string().describe('a `chat.completion.chunk` as JSON; the last event is `[DONE]`, or `{"error":{…}}` when the stream fails after it began'),
  })
  .describe('a server-sent event');

const ResponseObject = named(responseSchema, 'Response');
/** One server-sent event of a streamed response. */
const ResponseStreamEvent = z
  .object({
    event: z.string().describe('the event type: response.created, response.output_text.delta, …, response.completed, or error'),
    data: z.string().describe('the event as JSON, with its `type` and `sequence_number`'),
  })
  .describe('a server-sent event');

const CheckoutSession = named(checkoutSessionSchema, 'CheckoutSession');
const Billing = named(billingSchema, 'Billing');
const Generation = named(generationSchema, 'Generation');
const File = named(fileSchema, 'File');
const ApiKey = named(keySchema, 'ApiKey');
const CreatedApiKey = named(createdKeySchema, 'CreatedApiKey');
const Organization = named(organizationSchema, 'Organization');
const OrganizationMember = named(memberSchema, 'OrganizationMember');
const OrganizationInvitation = named(invitationSchema, 'OrganizationInvitation');

const list = <T extends z.ZodTypeAny>(item: T) => z.object({ object: z.literal('list'), data: z.array(item) });

const json = (schema: z.ZodTypeAny, description: string) => ({ description, content: { 'application/json': { schema } } });
const errors = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((s) => [s, json(ErrorBody, ERROR_TEXT[s] ?? 'Error')])) as RouteConfig['responses'];
const ERROR_TEXT: Record<number, string> = {
  400: 'Invalid request; the message names the field',
  401: 'Missing, malformed, unknown, revoked, disabled or expired key',
  402: 'Insufficient balance, an app’s spend cap or the key’s spend limit reached',
  403: 'The model needs a paid account or is not among the key’s allowed models, a signed link expired or was tampered with, the server takes no payments (`payments_not_configured`), or a management key where models are called or a wallet is used (`management_key_not_allowed`)',
  404: 'Unknown object, or another account’s',
  409: 'Conflict with the current state',
  413: 'Body or upload too large',
  415: 'The body is not application/json',
  422: 'Idempotency-Key reused with another body',
  429: 'Rate limit or concurrency limit; see Retry-After',
  500: 'Internal error',
  502: 'The model provider failed',
  503: 'A dependency is unavailable',
  504: 'The model provider timed out',
};
/** Every key-authenticated route: 403 too, as a management key is refused wherever models are called or a wallet is used (docs/organizations.md). */
const common = [401, 403, 429, 500, 503];
/**
 * The statuses of a provisioning route (docs/organizations.md): `common`, and a 403 of its own:
 * an API key for models there, or a role below the one the route needs.
 */
const managing = (...statuses: number[]): RouteConfig['responses'] => ({
  ...errors(...statuses, ...common),
  403: json(
    ErrorBody,
    'An API key for models on a management route (`management_key_required`), a role below the one needed (`admin_role_required`, `owner_role_required`), or what a management key may not do (`management_key_not_allowed`, `organization_scoped_key`)',
  ),
});
/**
 * OpenAPI links (Link Objects): where one operation's answer gives the id another takes, so that
 * a client, and schemathesis's stateful phase, can follow a created job or file to the
 * operations on it. `id` is a JSON pointer into the response body.
 */
interface Link {
  operationId: string;
  parameters: Record<string, string>;
  description?: string;
}
const linkTo = (operationIds: Record<string, string>, id = '$response.body#/id'): Record<string, Link> =>
  Object.fromEntries(Object.entries(operationIds).map(([name, operationId]) => [name, { operationId, parameters: { id }, description: LINK_TEXT[operationId] }]));
const LINK_TEXT: Record<string, string> = {
  getGeneration: 'The job, by its id',
  cancelGeneration: 'Cancel the job, by its id',
  getGenerationOutput: 'The job’s result (its `expires` and `signature` are in the query of `output.url`)',
  getFile: 'The file, by its id',
  getFileContent: 'The file’s bytes (its `expires` and `signature` are in the query of `url`)',
  getModel: 'The first model of the list, by its id',
  getChatCompletion: 'The completion’s record (usage and cost), by its id',
  getResponse: 'The response’s record (usage and cost), by its id',
};
const withLinks = <T extends object>(response: T, links: Record<string, Link>) => ({ ...response, links });
const jobLinks = linkTo({ GetGeneration: 'getGeneration', CancelGeneration: 'cancelGeneration', GetGenerationOutput: 'getGenerationOutput' });
const fileLinks = linkTo({ GetFile: 'getFile', GetFileContent: 'getFileContent' });
/** A path id: as long as core accepts (longer: 400); an unknown one is 404. */
const idParam = (name: string, maxLength: number) => z.object({ [name]: z.string().min(1).max(maxLength) });
/** Core's limits on ids (generationIdInput, the files procedures, modelIdInput). */
const JOB_ID_MAX = 100;
const FILE_ID_MAX = 100;
const MODEL_ID_MAX = 200;
/** completionIdInput (core/chat/records.ts). */
const COMPLETION_ID_MAX = 100;
const idempotencyKey = idempotencyKeySchema.optional().describe('Same key and body: the first response, one job (kept 24 hours); 1 to 255 printable ASCII characters, no spaces');

/**
 * The signed download links (adapters/rest/download.ts): streamed, with validators, one byte
 * range, conditional requests, and HEAD (the same answer without the bytes; HEAD is not a
 * separate operation here, as everywhere in this document).
 */
const DOWNLOAD_TEXT =
  'Streams the bytes. Every answer has `ETag` (strong), `Last-Modified` and `Accept-Ranges: bytes`. ' +
  '`Range: bytes=a-b` (also `a-` and `-n`) answers 206 with that one range; a range outside the object answers 416 with `Content-Range: bytes */size`; ' +
  'a malformed Range header, another unit, or several ranges that do not merge into one are ignored (200, the whole object). ' +
  '`If-Range` with an older ETag or date is ignored too (200 whole). `If-None-Match` (or `If-Modified-Since`) that still matches answers 304. ' +
  'HEAD answers the same headers without the bytes.';
const downloadHeaders = z.object({
  Range: z.string().optional().describe('bytes=first-last, bytes=first-, or bytes=-suffix: one range; anything else is ignored'),
  'If-Range': z.string().optional().describe('an ETag or an HTTP date: Range applies only while it still names this object'),
  'If-None-Match': z.string().optional().describe('ETags the client holds: 304 when one matches'),
  'If-Modified-Since': z.string().optional().describe('an HTTP date: 304 when the object is not newer (If-None-Match wins when both are sent)'),
});
const header = (description: string, type: 'string' | 'integer' = 'string') => ({ description, schema: { type } });
const objectHeaders = {
  ETag: header('strong entity tag of the stored object'),
  'Last-Modified': header('when the object was stored'),
  'Accept-Ranges': header('bytes'),
};
const downloadResponses = (what: string): RouteConfig['responses'] => ({
  200: {
    description: `${what}, whole`,
    headers: { ...objectHeaders, 'Content-Length': header('the object’s size in bytes', 'integer'), 'Content-Disposition': header('inline; filename="…"') },
  },
  206: {
    description: `One byte range of ${what.toLowerCase()}`,
    headers: { ...objectHeaders, 'Content-Length': header('the range’s length in bytes', 'integer'), 'Content-Range': header('bytes first-last/size') },
  },
  304: { description: 'Not modified: If-None-Match or If-Modified-Since still matches; no body', headers: objectHeaders },
  416: { ...json(ErrorBody, 'The range is outside the object (`range_not_satisfiable`)'), headers: { 'Content-Range': header('bytes */size') } },
  ...errors(400, 403, 404, 500),
});

/** What the operator configured that decides which requests are valid: the top-up bounds and the plans (core checks them against the same values). */
export interface DocumentedConfig {
  topUpMinCents: number;
  topUpMaxCents: number;
  plans: string[];
}

/** A media model of the catalog, as the document states its job requests. */
export type DocumentedMediaModel = DocumentedModel & { id: string };

/**
 * The document for this server's configuration and catalog: a job's `model` is one of the media
 * models, and its `settings` and `inputs` are that model's (core/generations/request-document.ts).
 */
export function buildOpenApiDocument(publicBaseUrl: string, config: DocumentedConfig, mediaModels: DocumentedMediaModel[]) {
  const registry = new OpenAPIRegistry();
  const bearer = registry.registerComponent('securitySchemes', 'bearerAuth', {
    type: 'http',
    scheme: 'bearer',
    description: 'Authorization: Bearer <API key>; on /keys and /organizations, a management key. Keys are never accepted in the query string.',
  });
  const secured = [{ [bearer.name]: [] }];
  const path = (config: RouteConfig) => registry.registerPath({ security: secured, ...config });

  // Organizations (issue 49, docs/payments.md "An organization's wallet"): one block, for easy merges.
  const ORGANIZATION_KEYS_DO_NOT_PAY =
    '403 `organization_key_cannot_pay` for a key of an organization’s wallet, and 403 `owner_session_required` with `organization_id`: an organization’s payments ' +
    'are made by its owners, signed in to the account pages.';
  path({ method: 'get', path: '/balance', operationId: 'getBalance', summary: 'The wallet balance', responses: { 200: json(Balance, 'The balance'), ...errors(...common) } });
  path({
    method: 'get',
    path: '/key',
    operationId: 'getKey',
    summary: 'The calling API key: its limits (spend limit, expiry, allowed models), its usage and what its limit leaves',
    description:
      '`usage_coins` is what the key was charged in its current period (the spend limit’s period; this calendar month, UTC, without a limit), ' +
      '`held_coins` what running requests reserve, `remaining_coins` the limit minus both (null without a limit).',
    responses: { 200: json(KeyInfo, 'The key'), ...errors(...common) },
  });
  path({
    method: 'get',
    path: '/wallet/history',
    operationId: 'listWalletHistory',
    summary: 'The wallet history, newest first: one row per top-up, grant, API usage or refund',
    request: { query: historyInput },
    responses: { 200: json(list(WalletEntry).extend({ has_more: z.boolean() }), 'A page of entries'), ...errors(400, ...common) },
  });
  path({
    method: 'post',
    path: '/credits/checkout',
    operationId: 'createCreditsCheckout',
    summary: 'A payment page (Stripe Checkout) for a top-up: send a person to its url; the coins come when the payment arrives',
    description:
      'Takes `amount_usd` (at most 2 decimals; 1 USD buys 1000 coins) between the server’s minimum and maximum (400 names `amount_usd` otherwise). ' +
      'Nothing is credited by this call or by the customer’s return from the page: the coins are added to the purchased pocket, once, when Stripe’s webhook ' +
      'reports the payment. 403 `payments_not_configured` when the server takes no payments (its operator has not set STRIPE_SECRET_KEY). ' +
      ORGANIZATION_KEYS_DO_NOT_PAY,
    request: {
      headers: z.object({ 'Idempotency-Key': idempotencyKeySchema.optional().describe('Same key and amount: the same Checkout Session (Stripe keeps keys 24 hours); another amount: 422') }),
      body: { required: true, content: { 'application/json': { schema: topUpCheckoutInput.omit({ idempotency_key: true }), example: { amount_usd: 20 } } } },
    },
    responses: { 200: json(CheckoutSession, 'The Checkout Session: its id and the page to send the customer to'), ...errors(400, 403, 413, 415, 422, 502, ...common) },
  });
  path({
    method: 'post',
    path: '/credits/subscription',
    operationId: 'createSubscriptionCheckout',
    summary: 'A payment page (Stripe Checkout, subscription mode) for a plan: each paid period grants the plan’s coins',
    description:
      'Takes `plan`, the name of one of the server’s plans (`GET /credits/billing` lists them; 400 names `plan` otherwise). 409 `already_subscribed` while the ' +
      'account has a running subscription: change or cancel it in the customer portal. Nothing is granted by this call: each paid invoice grants its period’s ' +
      'coins to the subscription pocket, once. 403 `payments_not_configured` when the server takes no payments (its operator has not set STRIPE_SECRET_KEY). ' +
      ORGANIZATION_KEYS_DO_NOT_PAY,
    request: {
      headers: z.object({ 'Idempotency-Key': idempotencyKeySchema.optional().describe('Same key and plan: the same Checkout Session') }),
      body: { required: true, content: { 'application/json': { schema: subscriptionCheckoutInput.omit({ idempotency_key: true }), example: { plan: 'Starter' } } } },
    },
    responses: { 200: json(CheckoutSession, 'The Checkout Session: its id and the page to send the customer to'), ...errors(400, 403, 409, 413, 415, 422, 502, ...common) },
  });
  path({
    method: 'get',
    path: '/credits/billing',
    operationId: 'getBilling',
    summary: 'What the account may pay and has paid: whether payments are on, the top-up bounds, the plans, its subscription and its latest top-ups with their receipts',
    description: ORGANIZATION_KEYS_DO_NOT_PAY,
    responses: { 200: json(Billing, 'The billing overview'), ...errors(403, ...common) },
  });
  path({
    method: 'get',
    path: '/models',
    operationId: 'listModels',
    summary: 'The models',
    request: { query: modelTypeFilter },
    responses: { 200: withLinks(json(list(Model), 'Models'), linkTo({ GetModel: 'getModel' }, '$response.body#/data/0/id')), ...errors(400, ...common) },
  });
  path({
    method: 'get',
    path: '/models/{id}',
    operationId: 'getModel',
    summary: 'One model, with an example request (ids may contain "/")',
    request: { params: idParam('id', MODEL_ID_MAX) },
    responses: { 200: json(Model, 'The model'), ...errors(400, 404, ...common) },
  });
  path({
    method: 'post',
    path: '/chat/completions',
    operationId: 'createChatCompletion',
    summary: 'A chat completion (OpenAI format), billed on real usage',
    request: { body: { required: true, content: { 'application/json': { schema: chatRequestSchema } } } },
    responses: {
      200: {
        description: 'The completion; with `stream: true`, server-sent `chat.completion.chunk` events then `[DONE]`',
        content: { 'application/json': { schema: ChatCompletion }, 'text/event-stream': { schema: ChatStreamEvent } },
        links: linkTo({ GetChatCompletion: 'getChatCompletion' }),
      },
      ...errors(400, 402, 403, 404, 413, 415, 502, 504, ...common),
    },
  });
  path({
    method: 'get',
    path: '/chat/completions/{id}',
    operationId: 'getChatCompletion',
    summary: 'A past chat completion’s model, usage, cost (`usage.cost_coins`) and duration, for clients that drop unknown usage fields',
    description:
      'Only to the account that made it: another account’s id gets the same 404 as a made-up one. Recorded when the request is charged: ' +
      'streamed or not, and also when the client went away or the provider failed after output began (then `finish_reason` is null). ' +
      'A request that was charged nothing because it failed has no record.',
    request: { params: z.object({ id: z.string().min(1).max(COMPLETION_ID_MAX).describe('the `id` of a chat completion, `chatcmpl-…`') }) },
    responses: { 200: json(CompletionRecord, 'The record'), ...errors(400, 404, ...common) },
  });
  path({
    method: 'post',
    path: '/responses',
    operationId: 'createResponse',
    summary: "A response (OpenAI's Responses API, stateless), billed as a chat completion",
    request: { body: { required: true, content: { 'application/json': { schema: responsesRequestSchema } } } },
    responses: {
      200: {
        description: 'The response; with `stream: true`, server-sent Responses events from `response.created` to `response.completed`',
        content: { 'application/json': { schema: ResponseObject }, 'text/event-stream': { schema: ResponseStreamEvent } },
        links: linkTo({ GetResponse: 'getResponse' }),
      },
      ...errors(400, 402, 403, 404, 413, 415, 502, 504, ...common),
    },
  });
  path({
    method: 'get',
    path: '/responses/{id}',
    operationId: 'getResponse',
    summary: 'A past response’s model, usage, cost (`usage.cost_coins`) and duration, as GET /chat/completions/{id} has them for chat',
    description: 'Only to the account that made it: another account’s id gets the same 404 as a made-up one.',
    request: { params: z.object({ id: z.string().min(1).max(COMPLETION_ID_MAX).describe('the `id` of a response, `resp_…`') }) },
    responses: { 200: json(CompletionRecord, 'The record'), ...errors(400, 404, ...common) },
  });
  const wait = z.object({
    'Idempotency-Key': idempotencyKey,
    Prefer: z.string().optional().describe('wait=N (N ≤ 60): answer with the finished job if it ends within N seconds; other preferences are ignored'),
  });
  path({
    method: 'post',
    path: '/generations',
    operationId: 'createGeneration',
    summary: 'Start a media job',
    request: {
      headers: wait,
      body: {
        required: true,
        // A job that runs on every fresh install (the demo image model): the schema fuzzer's examples phase starts a real job with it.
        content: { 'application/json': { schema: generationRequestSchema, example: { model: 'mas/image-demo', prompt: 'a lighthouse at dusk', settings: { size: 128 } } } },
      },
    },
    responses: {
      200: withLinks(json(Generation, 'Finished within Prefer: wait'), jobLinks),
      202: withLinks(json(Generation, 'The job, queued'), jobLinks),
      ...errors(400, 402, 403, 404, 413, 415, 422, ...common),
    },
  });
  path({
    method: 'get',
    path: '/generations',
    operationId: 'listGenerations',
    summary: 'The account’s jobs, newest first: their status, model, cost and result link',
    description:
      'Pages like the wallet history: `limit` (1 to 100, default 20) jobs a page, `has_more` when more follow, and `starting_after`, the `id` of the last job of ' +
      'the previous page, for the next. `status` keeps the jobs in that status only. A `starting_after` that names no job of this account (an unknown id, ' +
      'or another account’s) answers 404 `generation_not_found`. Succeeded jobs carry a fresh `output.url` while their result is kept.',
    request: { query: listGenerationsInput },
    responses: {
      200: withLinks(json(list(Generation).extend({ has_more: z.boolean() }), 'A page of jobs'), linkTo({ GetGeneration: 'getGeneration' }, '$response.body#/data/0/id')),
      ...errors(400, 404, ...common),
    },
  });
  path({
    method: 'get',
    path: '/generations/{id}',
    operationId: 'getGeneration',
    summary: 'A job',
    request: { params: idParam('id', JOB_ID_MAX) },
    responses: { 200: withLinks(json(Generation, 'The job'), linkTo({ CancelGeneration: 'cancelGeneration', GetGenerationOutput: 'getGenerationOutput' })), ...errors(400, 404, ...common) },
  });
  path({
    method: 'post',
    path: '/generations/{id}/cancel',
    operationId: 'cancelGeneration',
    summary: 'Cancel a job not yet finished (refunded in full); no body',
    request: { params: idParam('id', JOB_ID_MAX) },
    responses: { 200: withLinks(json(Generation, 'The canceled job'), linkTo({ GetGeneration: 'getGeneration' })), ...errors(400, 404, 409, 413, 415, ...common) },
  });
  registry.registerPath({
    method: 'get',
    path: '/generations/{id}/output',
    operationId: 'getGenerationOutput',
    summary: 'A job’s result, through its signed link (no API key)',
    security: [],
    description: DOWNLOAD_TEXT,
    request: { params: idParam('id', JOB_ID_MAX), query: z.object({ expires: z.string(), signature: z.string() }), headers: downloadHeaders },
    responses: downloadResponses('The result'),
  });
  path({
    method: 'post',
    path: '/files',
    operationId: 'createFile',
    summary: 'Upload a file (multipart field `file`, at most 50 MB)',
    request: {
      headers: wait.pick({ 'Idempotency-Key': true }),
      body: {
        required: true,
        content: {
          'multipart/form-data': {
            schema: z.object({
              file: z
                .string()
                .openapi({ format: 'binary', contentMediaType: 'application/octet-stream' } as object)
                .describe('the file (binary, at most 50 MB); a part without a filename is named "upload" and may be at most 1 MB'),
            }),
          },
        },
      },
    },
    responses: { 200: withLinks(json(File, 'The file'), fileLinks), ...errors(400, 413, 422, ...common) },
  });
  path({
    method: 'get',
    path: '/files/{id}',
    operationId: 'getFile',
    summary: 'A file, with a fresh signed link',
    request: { params: idParam('id', FILE_ID_MAX) },
    responses: { 200: withLinks(json(File, 'The file'), linkTo({ GetFileContent: 'getFileContent' })), ...errors(400, 404, ...common) },
  });
  registry.registerPath({
    method: 'get',
    path: '/files/{id}/content',
    operationId: 'getFileContent',
    summary: 'A file’s bytes, through its signed link (no API key)',
    security: [],
    description: DOWNLOAD_TEXT,
    request: { params: idParam('id', JOB_ID_MAX), query: z.object({ expires: z.string(), signature: z.string() }), headers: downloadHeaders },
    responses: downloadResponses('The file'),
  });
  path({
    method: 'get',
    path: '/webhook_secret',
    operationId: 'getWebhookSecret',
    summary: 'The secret that signs this account’s webhooks',
    responses: { 200: json(z.object({ object: z.literal('webhook_secret'), secret: z.string() }), 'The secret'), ...errors(...common) },
  });
  // The provisioning API (docs/organizations.md): a management key's routes; an API key for models gets 403 on each.
  const MANAGEMENT = 'Needs a management key (made on the API keys page or with `mas key create --management`); an API key for models gets 403 `management_key_required`. ';
  path({
    method: 'get',
    path: '/keys',
    operationId: 'listManagedKeys',
    summary: 'The API keys this management key manages: the personal ones, or an organization’s with `organization_id`',
    description:
      MANAGEMENT +
      'Without `organization_id`: the person’s personal keys (a management key made for one organization: that organization’s). With it: every key of the organization for an admin or owner, ' +
      'a member’s own for a member; an organization the caller is not in answers 404. Revoked keys are listed with `revoked_at`. Never a secret.',
    request: { query: createManagedKeyInput.pick({ organization_id: true }) },
    responses: { 200: json(list(ApiKey), 'The keys, oldest first'), ...managing(400, 404) },
  });
  path({
    method: 'post',
    path: '/keys',
    operationId: 'createManagedKey',
    summary: 'Create an API key, in the personal wallet or, with `organization_id`, the organization’s; the secret is in this answer only',
    description:
      MANAGEMENT +
      'Every field is optional. A key of an organization spends from its wallet and belongs to the caller as a member: it is also bound by the member’s spend limit. ' +
      'At most 10 active keys per account, and per member of an organization (400 `key_limit_reached`). A management key cannot create management keys (403 `management_key_not_allowed`). ' +
      '`key` in the answer is the secret: it is shown this once and never again.',
    request: {
      body: {
        required: false,
        content: {
          'application/json': {
            schema: createManagedKeyInput.omit({ management: true }),
            example: { name: 'customer-42', spend_limit_coins: '5', spend_limit_period: 'monthly', allowed_models: ['mas/echo'] },
          },
        },
      },
    },
    responses: { 201: json(CreatedApiKey, 'The key, with its secret `key`, shown only this once'), ...managing(400, 404, 413, 415) },
  });
  const keyPath = { params: keyIdInput };
  path({
    method: 'get',
    path: '/keys/{id}',
    operationId: 'getManagedKey',
    summary: 'One API key, with its limits and usage (never its secret)',
    description: MANAGEMENT + 'A key the caller may not manage (another person’s, or outside the management key’s organization) answers 404, as an unknown one.',
    request: keyPath,
    responses: { 200: json(ApiKey, 'The key'), ...managing(400, 404) },
  });
  path({
    method: 'patch',
    path: '/keys/{id}',
    operationId: 'updateManagedKey',
    summary: 'Change an API key: its name, spend limit and period, expiry, allowed models, or whether it is disabled',
    description:
      MANAGEMENT +
      'A field left out keeps its value; `null` removes a limit. `disabled: true` refuses the key (401 `api_key_disabled`) until `disabled: false`. ' +
      'A revoked key cannot be changed (409 `key_revoked`).',
    request: {
      ...keyPath,
      body: { required: false, content: { 'application/json': { schema: updateKeyInput.omit({ id: true }), example: { spend_limit_coins: '10', disabled: true } } } },
    },
    responses: { 200: json(ApiKey, 'The key as it is now'), ...managing(400, 404, 409, 413, 415) },
  });
  path({
    method: 'delete',
    path: '/keys/{id}',
    operationId: 'deleteManagedKey',
    summary: 'Revoke an API key: it is refused (401) from its next request on, on every instance',
    description: MANAGEMENT + 'Answers the revoked key, `revoked_at` set; revoking it again answers the same. A management key may revoke itself.',
    request: keyPath,
    responses: { 200: json(ApiKey, 'The revoked key'), ...managing(400, 404) },
  });
  const orgPath = { params: organizationIdInput };
  path({
    method: 'get',
    path: '/organizations',
    operationId: 'listOrganizations',
    summary: 'The organizations the caller belongs to, with their role and spend limit in each',
    description: MANAGEMENT + 'A management key made for one organization lists that one only.',
    responses: { 200: json(list(Organization), 'The organizations, by name'), ...managing() },
  });
  path({
    method: 'post',
    path: '/organizations',
    operationId: 'createOrganization',
    summary: 'Create an organization with an empty wallet; the caller is its first owner',
    description:
      MANAGEMENT +
      'A person owns at most 10 organizations (400 `organization_limit_reached`). A management key made for one organization cannot create another (403 `organization_scoped_key`).',
    request: { body: { required: true, content: { 'application/json': { schema: createOrganizationInput, example: { name: 'Acme Research' } } } } },
    responses: { 201: json(Organization, 'The organization'), ...managing(400, 413, 415) },
  });
  path({
    method: 'get',
    path: '/organizations/{id}',
    operationId: 'getOrganization',
    summary: 'One organization, with its wallet’s `balance`',
    description: MANAGEMENT + 'An organization the caller is not a member of answers 404, as an unknown one.',
    request: orgPath,
    responses: { 200: json(Organization, 'The organization and its balance'), ...managing(400, 404) },
  });
  path({
    method: 'delete',
    path: '/organizations/{id}',
    operationId: 'deleteOrganization',
    summary: 'Delete an organization (owners): its keys, apps and invitations end at once',
    description:
      MANAGEMENT + 'Refused while its wallet holds coins (409 `organization_has_balance`) or a plan runs (409 `organization_has_subscription`). Its ledger is kept.',
    request: orgPath,
    responses: {
      200: json(z.object({ id: z.string(), object: z.literal('organization'), deleted: z.literal(true), keys_revoked: z.number().int().describe('keys revoked by the deletion') }).strict(), 'Deleted'),
      ...managing(400, 404, 409),
    },
  });
  path({
    method: 'get',
    path: '/organizations/{id}/members',
    operationId: 'listOrganizationMembers',
    summary: 'The members (admins and owners): role, spend limit and period, and what each spent in it',
    request: orgPath,
    description: MANAGEMENT + 'A plain member gets 403 `admin_role_required`.',
    responses: { 200: json(list(OrganizationMember), 'The members, by the date they joined'), ...managing(400, 404) },
  });
  const memberPath = { params: memberRef };
  path({
    method: 'patch',
    path: '/organizations/{id}/members/{user_id}',
    operationId: 'updateOrganizationMember',
    summary: 'Change a member’s role or spend limit (admins; an owner only by an owner)',
    description:
      MANAGEMENT +
      'A field left out keeps its value; `spend_limit_coins: null` removes the limit. The limit covers all the member’s keys of the organization, checked in the same reservation as the ' +
      'balance. The last owner keeps the role (409 `last_owner`). `user_id` is the person’s account id, as the members list gives it.',
    request: {
      ...memberPath,
      body: { required: false, content: { 'application/json': { schema: updateMemberInput.omit({ id: true, user_id: true }), example: { role: 'member', spend_limit_coins: '50', spend_limit_period: 'monthly' } } } },
    },
    responses: { 200: json(OrganizationMember, 'The member as they are now'), ...managing(400, 404, 409, 413, 415) },
  });
  path({
    method: 'delete',
    path: '/organizations/{id}/members/{user_id}',
    operationId: 'removeOrganizationMember',
    summary: 'Remove a member (admins; an owner only by an owner; anyone may remove themself): their keys of the organization are revoked at once',
    description: MANAGEMENT + 'Their organization keys answer 401 from their next request on, and their apps’ connections to the organization end. The last owner cannot go (409 `last_owner`).',
    request: memberPath,
    responses: {
      200: json(
        z.object({ ...memberSchema.shape, deleted: z.literal(true), keys_revoked: z.number().int(), apps_disconnected: z.number().int() }).strict(),
        'The member removed, with how many keys and app connections ended',
      ),
      ...managing(400, 404, 409),
    },
  });
  path({
    method: 'get',
    path: '/organizations/{id}/invitations',
    operationId: 'listOrganizationInvitations',
    summary: 'The invitations still waiting for an answer (admins), newest first',
    description: MANAGEMENT + 'Never the links’ tokens: only the invited address has the link.',
    request: orgPath,
    responses: { 200: json(list(OrganizationInvitation), 'The pending invitations'), ...managing(400, 404) },
  });
  path({
    method: 'post',
    path: '/organizations/{id}/invitations',
    operationId: 'createOrganizationInvitation',
    summary: 'Invite an e-mail address (admins; an owner only by an owner): the link is mailed to it, valid 7 days, once',
    description:
      MANAGEMENT +
      'The invitation is bound to the address: accepting needs signing in as it. A new invitation of the same address revokes the earlier one; an address already a member is 409 `already_member`; ' +
      'at most 50 wait at once (400 `invitation_limit_reached`). The answer never holds the link.',
    request: {
      ...orgPath,
      body: { required: true, content: { 'application/json': { schema: createInvitationInput.omit({ id: true }), example: { email: 'dev@example.com', role: 'member' } } } },
    },
    responses: { 201: json(OrganizationInvitation, 'The invitation, mailed'), ...managing(400, 404, 409, 413, 415) },
  });
  path({
    method: 'delete',
    path: '/organizations/{id}/invitations/{invitation_id}',
    operationId: 'revokeOrganizationInvitation',
    summary: 'Revoke an invitation (admins): its link answers 410 from then on',
    description: MANAGEMENT + 'Revoking it again answers the same; an accepted invitation cannot be revoked (409 `invitation_already_accepted`: remove the member instead).',
    request: { params: invitationRef },
    responses: { 200: json(OrganizationInvitation, 'The invitation, `status: revoked`'), ...managing(400, 404, 409) },
  });
  registry.registerPath({ method: 'get', path: '/openapi.json', operationId: 'getOpenApiDocument', summary: 'This document', security: [], responses: { 200: { description: 'OpenAPI 3.1' } } });
  registry.registerPath({ method: 'get', path: '/docs', operationId: 'getDocs', summary: 'A readable reference of this document', security: [], responses: { 200: { description: 'HTML' } } });

  const doc = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Model Access Service',
      version: '1.0.0',
      description: 'Paid access to text, image, video, audio and 3D models. Every call is paid in coins from the wallet of the key’s account.',
    },
    servers: [{ url: `${publicBaseUrl}/api/v1` }],
    security: secured,
  });
  declareServerRules(doc, config);
  declareJobModels(doc, mediaModels);
  return doc;
}

type Json = Record<string, unknown>;
const SAFE_INTEGER = Number.MAX_SAFE_INTEGER;

/**
 * What the server checks beyond what zod-to-openapi renders, written into the document:
 * - zod's integers are safe integers: every integer in a request gets that range;
 * - a `pattern` is a JavaScript regular expression, whose \d is [0-9] (in Python's, which
 *   schemathesis uses, \d is any Unicode digit);
 * - the names of the multipart parts of an upload: no control characters.
 * The refusals core makes in refinements and transforms (the chat request's: max_tokens and
 * max_completion_tokens not both, tool_choice only with tools, a message's content…) are not
 * here: core's schemas carry them as JSON Schema (`.meta()`, core/chat/schema.ts), so the
 * document states them from the server's own schemas.
 */
function declareServerRules(doc: ReturnType<OpenApiGeneratorV31['generateDocument']>, config: DocumentedConfig): void {
  for (const item of Object.values(doc.paths ?? {}) as Json[]) {
    for (const op of Object.values(item) as Json[]) {
      for (const param of (op.parameters ?? []) as Json[]) if (param.schema) walkRequestSchema(param.schema as Json);
      const content = ((op.requestBody as Json | undefined)?.content ?? {}) as Record<string, Json>;
      for (const media of Object.values(content)) if (media.schema) walkRequestSchema(media.schema as Json);
    }
  }
  const bodySchema = (path: string, media: string) =>
    ((doc.paths?.[path]?.post?.requestBody as Json | undefined)?.content as Record<string, Json> | undefined)?.[media]?.schema as Json | undefined;
  declarePaymentBounds(bodySchema('/credits/checkout', 'application/json'), bodySchema('/credits/subscription', 'application/json'), config);
  const upload = bodySchema('/files', 'multipart/form-data');
  if (upload) {
    // Parts other than `file` are ignored, but busboy refuses a part header holding a control
    // character (RFC 9110 field values); clients escape only CR, LF and '"' in part names.
    upload.propertyNames = { pattern: '^[^\\x00-\\x08\\x0a-\\x1f\\x7f]*$', description: 'no control characters but tab' };
  }
}

function walkRequestSchema(schema: unknown): void {
  if (Array.isArray(schema)) return schema.forEach(walkRequestSchema);
  if (!schema || typeof schema !== 'object') return;
  const node = schema as Json;
  const types = Array.isArray(node.type) ? node.type : [node.type];
  if (types.includes('integer')) {
    node.minimum ??= -SAFE_INTEGER;
    node.maximum ??= SAFE_INTEGER;
  }
  if (typeof node.pattern === 'string') node.pattern = node.pattern.replaceAll('\\d', '[0-9]');
  for (const value of Object.values(node)) if (value && typeof value === 'object') walkRequestSchema(value);
}

/**
 * The operator's top-up bounds and plans (TOPUP_MIN_USD, TOPUP_MAX_USD, PLANS_FILE), which core
 * checks (checkTopUpAmount, createSubscriptionCheckout): a number amount gets them as minimum and
 * maximum. "At most 2 decimals" stays in words: `multipleOf: 0.01` would make validators that
 * divide binary floats refuse 20.07 (20.07 / 0.01 is 2006.9999999999998), and a decimal text
 * cannot carry a numeric bound in JSON Schema. `plan` is one of the plans' names (the server also
 * takes them in any case, spaces trimmed).
 */
function declarePaymentBounds(checkout: Json | undefined, subscription: Json | undefined, config: DocumentedConfig): void {
  const usd = (cents: number) => cents / 100;
  const amount = (checkout?.properties as Record<string, Json> | undefined)?.amount_usd;
  for (const branch of (amount?.anyOf ?? []) as Json[]) {
    if (branch.type === 'number') {
      delete branch.exclusiveMinimum;
      Object.assign(branch, { minimum: usd(config.topUpMinCents), maximum: usd(config.topUpMaxCents), description: 'at most 2 decimals' });
    } else if (branch.type === 'string') {
      branch.description = `a decimal amount from ${usd(config.topUpMinCents)} to ${usd(config.topUpMaxCents)}, at most 2 decimals`;
    }
  }
  if (amount) amount.description = `US dollars, at most 2 decimals, from ${usd(config.topUpMinCents)} to ${usd(config.topUpMaxCents)} on this server (TOPUP_MIN_USD, TOPUP_MAX_USD); 1 USD buys 1000 coins, 1 cent 10`;
  const plan = (subscription?.properties as Record<string, Json> | undefined)?.plan;
  if (plan && config.plans.length > 0) {
    plan.enum = config.plans;
    plan.description = 'the name of one of this server’s plans (GET /credits/billing lists them)';
  } else if (plan) {
    // An empty enum is not a valid schema for every validator: "no value" is `not: {}`.
    plan.not = {};
    plan.description = 'this server offers no plans (PLANS_FILE): every name is refused';
  }
}

/**
 * `POST /generations`: the `model` is one of the catalog's media models (another id is 404, a
 * text model's 400 wrong_endpoint), and the `settings` and `inputs` are that model's, as core
 * checks them (an unknown setting or input is refused): one branch per model.
 */
function declareJobModels(doc: ReturnType<OpenApiGeneratorV31['generateDocument']>, models: DocumentedMediaModel[]): void {
  const body = ((doc.paths?.['/generations']?.post?.requestBody as Json | undefined)?.content as Record<string, Json> | undefined)?.['application/json']?.schema as Json | undefined;
  const model = (body?.properties as Record<string, Json> | undefined)?.model;
  if (!body || !model) return;
  model.enum = models.map((m) => m.id);
  model.description = 'a media model of GET /models (image, video, audio, 3d); its settings and inputs are below';
  body.anyOf = models.map((m) => {
    const inputs = inputsDocument(m);
    return {
      title: m.id,
      properties: { model: { const: m.id }, settings: settingsDocument(m), inputs },
      ...(Array.isArray(inputs.required) ? { required: ['inputs'] } : {}),
    };
  });
}

