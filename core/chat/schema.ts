import { z } from 'zod';
import { CoreError } from '../errors.ts';
import { jsonRecord } from '../json-record.ts';
import type { SupportedParameter } from '../catalog/schema.ts';
import type { ResponseFormat, ToolCall, ToolChoice, ToolSpec } from '../ports.ts';
import { MAX_SCHEMA_BYTES, MAX_TOOLS, schemaShapeProblem } from './json-schema.ts';

/**
 * POST /chat/completions, in the OpenAI chat-completions format (SPEC part 4). Text only.
 * Harmless fields the OpenAI clients send are passed on (stop, seed, penalties, user) or
 * ignored (metadata, store, service_tier…); fields that would change the shape of the answer
 * and are not supported get a 400 that names them.
 */
const textPart = z.object({ type: z.literal('text'), text: z.string() });

/*
 * The refusals below are made in refinements and transforms, which JSON Schema cannot see: each
 * is also written as JSON Schema with `.meta()`, beside the code that makes it, so that the
 * documents made from these schemas (the OpenAPI document, the MCP tools' input schemas) state
 * every rule the server enforces, and no other.
 */
const notNull = { not: { type: 'null' } };
/** The field is there and not null. */
export const present = (name: string) => ({ required: [name], properties: { [name]: notNull } });
/** `field` (not null) only with a non-empty `tools`. */
export const onlyWithTools = (field: string) => ({
  description: `${field} only with tools`,
  anyOf: [{ not: present(field) }, { required: ['tools'], properties: { tools: { type: 'array', minItems: 1 } } }],
});
const TEXT_PART_JSON = { type: 'object', properties: { type: { const: 'text' }, text: { type: 'string' } }, required: ['type', 'text'], description: 'a text part: images and other parts are not supported' };

const content = z.union([
  z.string(),
  z
    .array(z.looseObject({ type: z.string() }))
    .min(1)
    .superRefine((parts, ctx) => {
      parts.forEach((part, i) => {
        if (part.type === 'image_url' || part.type === 'image') {
          ctx.addIssue({ code: 'custom', path: [i], message: 'images are not supported; content is text only' });
        } else if (part.type !== 'text') {
          ctx.addIssue({ code: 'custom', path: [i], message: `content parts of type '${part.type}' are not supported; content is text only` });
        } else if (!textPart.safeParse(part).success) {
          ctx.addIssue({ code: 'custom', path: [i, 'text'], message: 'a text part needs a string `text`' });
        }
      });
    })
    .transform((parts) => parts.map((p) => (p as z.infer<typeof textPart>).text).join(''))
    .meta({ items: TEXT_PART_JSON }),
]);

/**
 * A JSON Schema (a tool's `parameters`, `response_format`'s `schema`): any object, whose shape
 * (depth, size) is checked without recursion; Ajv compiles it later (prepareChat), once the
 * request is known to be within every cheap limit.
 */
const jsonSchemaObject = jsonRecord(z.unknown()).superRefine((schema, ctx) => {
  const problem = schemaShapeProblem(schema);
  if (problem) ctx.addIssue({ code: 'custom', message: `the schema ${problem}` });
});

const toolCallSchema = z.object({
  id: z.string().min(1).max(256),
  type: z.literal('function'),
  function: z.object({ name: z.string().max(64), arguments: z.string() }),
});

const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/**
 * One message, in the chat-completions format. Its output keeps that format (content parts
 * joined into one string), so that a message parsed once (by the MCP tool) parses again.
 */
export const chatMessageSchema = z
  .object({
    role: z.enum(ROLES, {
      error: "must be one of 'system', 'developer', 'user', 'assistant', 'tool' ('function' messages are the deprecated form of 'tool')",
    }),
    content: content.nullish(),
    name: z.string().max(64).optional(),
    tool_calls: z.array(toolCallSchema).min(1).max(MAX_TOOLS).nullish(),
    tool_call_id: z.string().min(1).max(256).optional(),
    refusal: z.string().nullish(),
  })
  .superRefine((m, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message });
    if (m.content == null && !(m.role === 'assistant' && m.tool_calls)) issue('content', 'is required (it may be null only on an assistant message with tool_calls)');
    if (m.tool_calls && m.role !== 'assistant') issue('tool_calls', 'is only allowed on assistant messages');
    if (m.role === 'tool' && m.tool_call_id === undefined) issue('tool_call_id', 'is required on a tool message');
    if (m.role !== 'tool' && m.tool_call_id !== undefined) issue('tool_call_id', 'is only allowed on tool messages');
  })
  .meta({
    allOf: [
      {
        description: 'content is required; it may be null or left out only on an assistant message with tool_calls',
        anyOf: [present('content'), { required: ['role', 'tool_calls'], properties: { role: { const: 'assistant' }, tool_calls: { type: 'array' } } }],
      },
      { description: 'tool_calls only on assistant messages', anyOf: [{ not: present('tool_calls') }, { properties: { role: { const: 'assistant' } } }] },
      { description: 'tool_call_id is required on a tool message', anyOf: [{ not: { required: ['role'], properties: { role: { const: 'tool' } } } }, { required: ['tool_call_id'] }] },
      { description: 'tool_call_id only on tool messages', anyOf: [{ not: { required: ['tool_call_id'] } }, { properties: { role: { const: 'tool' } } }] },
    ],
  });
export type ChatMessageInput = z.output<typeof chatMessageSchema>;

/** A function tool, in the chat-completions format. Its schema's limits are checked cheaply here (json-schema.ts). */
export const chatToolSchema = z.object({
  type: z.literal('function', { error: "only tools of type 'function' are supported" }),
  function: z.object({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1 to 64 letters, digits, _ or -'),
    description: z.string().max(MAX_SCHEMA_BYTES).optional(),
    parameters: jsonSchemaObject.optional(),
    strict: z.boolean().nullish(),
  }),
});

/**
 * At most MAX_TOOLS tools, with different names. Parsing 10,000 tools before counting them is
 * bounded by the body's size (4 MB): each schema's shape check stops at its limits.
 */
export const toolsSchema = z
  .array(chatToolSchema)
  .min(1, 'must contain at least one tool (or be omitted)')
  .max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`)
  .superRefine((tools, ctx) => {
    const seen = new Set<string>();
    tools.forEach((t, i) => {
      if (seen.has(t.function.name)) ctx.addIssue({ code: 'custom', path: [i, 'function', 'name'], message: `'${t.function.name}' is the name of an earlier tool` });
      seen.add(t.function.name);
    });
  });

export const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1).max(64) }) }),
]);

export const responseFormatSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({
      name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1 to 64 letters, digits, _ or -'),
      description: z.string().max(MAX_SCHEMA_BYTES).optional(),
      schema: jsonSchemaObject.optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

/** A message as core and the providers use it: `content` a string ('' for none), tool calls and ids camel-cased. */
export interface ChatMessage {
  role: (typeof ROLES)[number];
  content: string;
  name?: string | undefined;
  toolCalls?: ToolCall[] | undefined;
  toolCallId?: string | undefined;
}

const positiveInt = z.number().int().positive();
const NULL_ONLY = { type: 'null', description: 'not supported: only null' };
const DEPRECATED = { type: 'null', description: 'deprecated function calling, not supported: use tools and tool_choice' };

/** OpenAI's own limit on the number of messages in one request. */
export const MAX_MESSAGES = 2048;

export const chatRequestSchema = z
  .object({
    model: z.string().min(1),
    messages: z.array(chatMessageSchema).min(1, 'must contain at least one message').max(MAX_MESSAGES, `must contain at most ${MAX_MESSAGES} messages`),
    max_tokens: positiveInt.nullish(),
    max_completion_tokens: positiveInt.nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
    stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
    seed: z.number().int().nullish(),
    presence_penalty: z.number().min(-2).max(2).nullish(),
    frequency_penalty: z.number().min(-2).max(2).nullish(),
    user: z.string().max(256).nullish(),
    n: z.number().int().nullish().meta({ enum: [1, null], description: 'only 1 is supported' }),
    tools: toolsSchema.nullish(),
    tool_choice: toolChoiceSchema.nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    response_format: responseFormatSchema.nullish(),
    // Accepted so their presence can be refused by name below.
    functions: z.unknown().optional().meta(DEPRECATED),
    function_call: z.unknown().optional().meta(DEPRECATED),
    logprobs: z.boolean().nullish().meta({ enum: [false, null], description: 'not supported: only false or null' }),
    top_logprobs: z.unknown().optional().meta(NULL_ONLY),
    audio: z.unknown().optional().meta(NULL_ONLY),
    modalities: z.array(z.string().meta({ const: 'text' })).nullish(),
    prediction: z.unknown().optional().meta(NULL_ONLY),
  })
  .meta({
    allOf: [
      { description: 'max_tokens or max_completion_tokens, not both', not: { required: ['max_tokens', 'max_completion_tokens'], properties: { max_tokens: notNull, max_completion_tokens: notNull } } },
      onlyWithTools('tool_choice'),
      onlyWithTools('parallel_tool_calls'),
      {
        description: 'stream_options only with stream: true',
        anyOf: [{ not: { required: ['stream_options'], properties: { stream_options: { type: 'object' } } } }, { required: ['stream'], properties: { stream: { const: true } } }],
      },
    ],
  })
  .transform((r, ctx) => {
    const refuse = (param: string, message: string) => ctx.addIssue({ code: 'custom', path: param.split('.').map((p) => (/^\d+$/.test(p) ? Number(p) : p)), message });
    if (r.max_tokens != null && r.max_completion_tokens != null) refuse('max_completion_tokens', 'send max_tokens or max_completion_tokens, not both');
    if (r.n != null && r.n !== 1) refuse('n', 'only n = 1 is supported');
    for (const key of ['functions', 'function_call'] as const) {
      if (r[key] != null) refuse(key, 'the deprecated function-calling parameters are not supported; use tools and tool_choice');
    }
    for (const key of ['audio', 'prediction', 'top_logprobs'] as const) {
      if (r[key] != null) refuse(key, 'is not supported');
    }
    if (r.logprobs) refuse('logprobs', 'is not supported');
    if (r.modalities && r.modalities.some((m) => m !== 'text')) refuse('modalities', "only ['text'] is supported");
    if (r.stream_options && !r.stream) refuse('stream_options', 'is only allowed when stream is true');
    const tools = r.tools ?? [];
    if (r.tool_choice != null && tools.length === 0) refuse('tool_choice', 'is only allowed when tools are given');
    if (r.parallel_tool_calls != null && tools.length === 0) refuse('parallel_tool_calls', 'is only allowed when tools are given');
    if (typeof r.tool_choice === 'object' && r.tool_choice && tools.length > 0 && !tools.some((t) => t.function.name === (r.tool_choice as { function: { name: string } }).function.name)) {
      refuse('tool_choice.function.name', `names no tool of 'tools'`);
    }
    // A tool result answers a call an earlier assistant message made.
    const calls = new Set<string>();
    r.messages.forEach((m, i) => {
      for (const call of m.tool_calls ?? []) calls.add(call.id);
      if (m.role === 'tool' && m.tool_call_id !== undefined && !calls.has(m.tool_call_id)) {
        refuse(`messages.${i}.tool_call_id`, `'${m.tool_call_id.slice(0, 64)}' answers no tool call of an earlier assistant message`);
      }
    });
    const responseFormat = r.response_format?.type === 'text' ? undefined : (r.response_format ?? undefined);
    const toolChoice: ToolChoice | undefined = r.tool_choice == null ? undefined : typeof r.tool_choice === 'string' ? r.tool_choice : { name: r.tool_choice.function.name };
    return {
      model: r.model,
      messages: r.messages.map(toChatMessage),
      maxTokens: r.max_tokens ?? r.max_completion_tokens ?? undefined,
      maxTokensParam: r.max_completion_tokens != null ? ('max_completion_tokens' as const) : ('max_tokens' as const),
      stream: r.stream ?? false,
      includeUsage: r.stream_options?.include_usage ?? false,
      tools: tools.map((t): ToolSpec => ({
        name: t.function.name,
        ...(t.function.description !== undefined && { description: t.function.description }),
        ...(t.function.parameters !== undefined && { parameters: t.function.parameters }),
        ...(t.function.strict != null && { strict: t.function.strict }),
      })),
      ...(toolChoice !== undefined && { toolChoice }),
      ...(r.parallel_tool_calls != null && { parallelToolCalls: r.parallel_tool_calls }),
      ...(responseFormat !== undefined && { responseFormat: toResponseFormat(responseFormat) }),
      /** The catalog's names (supported_parameters) of the parameters this request uses. */
      usedParameters: usedParameters(r),
      options: {
        ...(r.temperature != null && { temperature: r.temperature }),
        ...(r.top_p != null && { top_p: r.top_p }),
        ...(r.stop != null && { stop: r.stop }),
        ...(r.seed != null && { seed: r.seed }),
        ...(r.presence_penalty != null && { presence_penalty: r.presence_penalty }),
        ...(r.frequency_penalty != null && { frequency_penalty: r.frequency_penalty }),
        ...(r.user != null && { user: r.user }),
      },
    };
  });
export type ChatRequest = z.output<typeof chatRequestSchema>;
export type ChatOptions = ChatRequest['options'];

function toChatMessage(m: ChatMessageInput): ChatMessage {
  return {
    role: m.role,
    content: m.content ?? '',
    ...(m.name !== undefined && { name: m.name }),
    ...(m.tool_calls && { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) }),
    ...(m.tool_call_id !== undefined && { toolCallId: m.tool_call_id }),
  };
}

function toResponseFormat(f: Exclude<z.output<typeof responseFormatSchema>, { type: 'text' }>): ResponseFormat {
  if (f.type === 'json_object') return { type: 'json_object' };
  const s = f.json_schema;
  return {
    type: 'json_schema',
    name: s.name,
    ...(s.description !== undefined && { description: s.description }),
    ...(s.schema !== undefined && { schema: s.schema }),
    ...(s.strict != null && { strict: s.strict }),
  };
}

/**
 * The parameters a request uses, by the names of the catalog's `supported_parameters`
 * (OpenRouter's): a model that lacks one refuses the request before anything is reserved.
 */
function usedParameters(r: {
  max_tokens?: unknown; max_completion_tokens?: unknown; temperature?: unknown; top_p?: unknown; stop?: unknown; seed?: unknown;
  presence_penalty?: unknown; frequency_penalty?: unknown; tools?: unknown; tool_choice?: unknown; parallel_tool_calls?: unknown;
  response_format?: { type: string } | null | undefined;
}): SupportedParameter[] {
  const used: SupportedParameter[] = [];
  const simple = ['temperature', 'top_p', 'stop', 'seed', 'presence_penalty', 'frequency_penalty', 'tools', 'tool_choice', 'parallel_tool_calls'] as const;
  if (r.max_tokens != null || r.max_completion_tokens != null) used.push('max_tokens');
  for (const name of simple) if (r[name] != null) used.push(name);
  const format = r.response_format?.type;
  if (format === 'json_object' || format === 'json_schema') used.push('response_format');
  if (format === 'json_schema') used.push('structured_outputs');
  return used;
}

/** `atLeast`: inputTokens is a lower bound (counting stopped once the messages could not fit). */
export function contextTooLong(inputTokens: number, maxTokens: number, contextWindow: number, atLeast = false): CoreError {
  return new CoreError(
    'invalid_request',
    `This model's context window is ${contextWindow} tokens; the messages use ${atLeast ? 'at least ' : ''}${inputTokens} and the output limit is ${maxTokens}. Shorten the messages or lower max_tokens.`,
    { param: 'messages', reason: 'context_length_exceeded' },
  );
}
