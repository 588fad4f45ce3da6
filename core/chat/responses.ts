import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { jsonRecord } from '../json-record.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import type { CoreDeps } from '../context.ts';
import { CoreError, invalid } from '../errors.ts';
import { coinsSchema } from '../views.ts';
import { chatCompletion } from './complete.ts';
import { chatRequestSchema, MAX_MESSAGES, onlyWithTools } from './schema.ts';

/**
 * POST /responses: OpenAI's Responses API, stateless, as a second shape of the chat use case
 * (docs/chat.md, "The Responses API"). The request is read in its own terms (so errors name
 * its own fields: `input.2.content`, `max_output_tokens`, `text.format`), turned into a
 * chat-completions request, run by the one chat use case (the same reservation, settle and
 * prices: billing is chat's), and its answer or its chunks turned into a `response` object or
 * the Responses stream events, which the `openai` SDKs' own parsers accept.
 *
 * Ids: a response's id is its chat completion's with `resp_` for `chatcmpl-`, so that the
 * completion's record (GET /chat/completions/{id}) is the response's too.
 */

const text = z.string().max(10_000_000);

/** A content part of an input message. Images and files are refused: chat is text only (SPEC). */
const inputPart = z
  .looseObject({ type: z.string() })
  .superRefine((part, ctx) => {
    if (part.type === 'input_image' || part.type === 'input_file' || part.type === 'input_audio') {
      ctx.addIssue({ code: 'custom', path: ['type'], message: `'${part.type}' parts are not supported; content is text only` });
    } else if (part.type !== 'input_text' && part.type !== 'output_text' && part.type !== 'text') {
      ctx.addIssue({ code: 'custom', path: ['type'], message: `must be 'input_text' or 'output_text' (content is text only)` });
    } else if (typeof part.text !== 'string') {
      ctx.addIssue({ code: 'custom', path: ['text'], message: 'a text part needs a string `text`' });
    }
  })
  .transform((part) => part.text as string);

const messageContent = z.union([
  text,
  z
    .array(inputPart)
    .min(1)
    .transform((parts) => parts.join(''))
    // The refinement above as JSON Schema, for the documents made from this schema (schema.ts says why).
    .meta({
      items: {
        type: 'object',
        properties: { type: { enum: ['input_text', 'output_text', 'text'] }, text: { type: 'string' } },
        required: ['type', 'text'],
        description: 'a text part: images, files and audio are not supported',
      },
    }),
]);

const messageItem = z.object({
  type: z.literal('message').optional(),
  id: z.string().max(256).optional(),
  status: z.string().max(64).optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer'], { error: "must be one of 'user', 'assistant', 'system', 'developer'" }),
  content: messageContent,
});
const functionCallItem = z.object({
  type: z.literal('function_call'),
  id: z.string().max(256).optional(),
  status: z.string().max(64).optional(),
  call_id: z.string().min(1).max(256),
  name: z.string().min(1).max(256),
  arguments: text,
});
const functionCallOutputItem = z.object({
  type: z.literal('function_call_output'),
  id: z.string().max(256).optional(),
  status: z.string().max(64).optional(),
  call_id: z.string().min(1).max(256),
  output: messageContent,
});
const inputItem = z.union([functionCallItem, functionCallOutputItem, messageItem], {
  error: "must be a message ({role, content}), a 'function_call' or a 'function_call_output' item",
});

const functionTool = z.object({
  type: z.literal('function', { error: "only 'function' tools are supported" }),
  name: z.string().min(1).max(64),
  description: z.string().max(100_000).nullish(),
  parameters: jsonRecord(z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const format = z.union(
  [
    z.object({ type: z.literal('text') }),
    z.object({ type: z.literal('json_object') }),
    z.object({
      type: z.literal('json_schema'),
      name: z.string().min(1).max(64),
      schema: jsonRecord(z.unknown()),
      description: z.string().max(100_000).nullish(),
      strict: z.boolean().nullish(),
    }),
  ],
  { error: "must be {type: 'text'}, {type: 'json_object'} or {type: 'json_schema', name, schema}" },
);

export const responsesRequestSchema = z.object({
  model: z.string().min(1),
  input: z.union([text, z.array(inputItem).min(1, 'must contain at least one item').max(MAX_MESSAGES, `must contain at most ${MAX_MESSAGES} items`)]),
  instructions: text.nullish(),
  tools: z.array(functionTool).nullish(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), name: z.string().min(1).max(64) })], {
      error: "must be 'none', 'auto', 'required' or {type: 'function', name}",
    })
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.object({ format: format.nullish(), verbosity: z.enum(['low', 'medium', 'high']).nullish() }).nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  stream: z.boolean().nullish(),
  user: z.string().max(256).nullish(),
  safety_identifier: z.string().max(256).nullish(),
  prompt_cache_key: z.string().max(256).nullish(),
  metadata: jsonRecord(z.string().max(512), z.string().max(64)).nullish(),
  service_tier: z.string().max(64).nullish(),
  truncation: z.enum(['disabled', 'auto']).nullish(),
  include: z.array(z.string().max(128)).max(16).nullish(),
  // Stateless: no stored responses yet, so these can only be left out.
  store: z.literal(false, { error: 'stored responses are not supported yet: send store: false or leave it out' }).nullish(),
  previous_response_id: z.null({ error: 'is not supported until stored responses exist: send the whole conversation in `input`' }).optional(),
  conversation: z.null({ error: 'is not supported until stored responses exist: send the whole conversation in `input`' }).optional(),
  background: z.literal(false, { error: 'background responses are not supported' }).nullish(),
  reasoning: z.null({ error: 'is not supported by these models' }).optional(),
})
  // Refused by the chat request it becomes (schema.ts); parallel_tool_calls without tools is dropped, not refused.
  .meta({ allOf: [onlyWithTools('tool_choice')] });
export type ResponsesRequest = z.output<typeof responsesRequestSchema>;

const CHAT_PARAM_TO_RESPONSES: Record<string, string> = {
  messages: 'input',
  max_tokens: 'max_output_tokens',
  response_format: 'text.format',
  tools: 'tools',
  tool_choice: 'tool_choice',
  parallel_tool_calls: 'parallel_tool_calls',
  temperature: 'temperature',
  top_p: 'top_p',
  model: 'model',
};

type ChatBody = Record<string, unknown> & { messages: Record<string, unknown>[] };

/** The request as a chat-completions request (the wire format core's chat schema reads). */
export function toChatBody(r: ResponsesRequest): ChatBody {
  const messages: Record<string, unknown>[] = [];
  if (r.instructions) messages.push({ role: 'system', content: r.instructions });
  if (typeof r.input === 'string') {
    messages.push({ role: 'user', content: r.input });
  } else {
    for (const item of r.input) {
      if (item.type === 'function_call') {
        const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
        // Consecutive calls are one assistant turn, as the chat format has them.
        const last = messages.at(-1);
        if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as unknown[]).push(call);
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      } else if (item.type === 'function_call_output') {
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: item.output });
      } else {
        messages.push({ role: item.role, content: item.content });
      }
    }
  }
  const f = r.text?.format;
  return {
    model: r.model,
    messages,
    ...(r.max_output_tokens != null && { max_tokens: r.max_output_tokens }),
    ...(r.temperature != null && { temperature: r.temperature }),
    ...(r.top_p != null && { top_p: r.top_p }),
    ...((r.safety_identifier ?? r.user) != null && { user: r.safety_identifier ?? r.user }),
    ...(r.tools?.length && {
      tools: r.tools.map((t) => ({
        type: 'function',
        function: { name: t.name, ...(t.description != null && { description: t.description }), ...(t.parameters != null && { parameters: t.parameters }), ...(t.strict != null && { strict: t.strict }) },
      })),
    }),
    ...(r.tool_choice != null && { tool_choice: typeof r.tool_choice === 'string' ? r.tool_choice : { type: 'function', function: { name: r.tool_choice.name } } }),
    ...(r.parallel_tool_calls != null && r.tools?.length && { parallel_tool_calls: r.parallel_tool_calls }),
    ...(f && f.type !== 'text' && {
      response_format:
        f.type === 'json_object'
          ? { type: 'json_object' }
          : { type: 'json_schema', json_schema: { name: f.name, schema: f.schema, ...(f.description != null && { description: f.description }), ...(f.strict != null && { strict: f.strict }) } },
    }),
    ...(r.stream && { stream: true, stream_options: { include_usage: true } }),
  };
}

/** A refusal of the chat schema, named in the Responses request's own terms. */
function refusalOf(error: z.ZodError): CoreError {
  const issue = error.issues[0]!;
  const [head, ...rest] = issue.path.map(String);
  const param = head === 'messages' ? 'input' : (CHAT_PARAM_TO_RESPONSES[head ?? ''] ?? head ?? 'input');
  const where = head === 'messages' ? param : [param, ...rest.filter((p) => p !== 'function')].join('.');
  return invalid(where, `Invalid value for '${where}': ${issue.message}.`);
}

export const responseUsageSchema = z
  .object({
    input_tokens: z.number().int(),
    input_tokens_details: z.object({ cached_tokens: z.number().int() }).strict(),
    output_tokens: z.number().int(),
    output_tokens_details: z.object({ reasoning_tokens: z.number().int() }).strict(),
    total_tokens: z.number().int(),
    cost_coins: coinsSchema.describe('the final charge, equal to the `API usage` entry of the wallet history'),
  })
  .strict();

const outputText = z.object({ type: z.literal('output_text'), text: z.string(), annotations: z.array(z.unknown()), logprobs: z.array(z.unknown()) }).strict();
const messageOutput = z
  .object({ type: z.literal('message'), id: z.string(), status: z.enum(['in_progress', 'completed', 'incomplete']), role: z.literal('assistant'), content: z.array(outputText) })
  .strict();
const functionCallOutput = z
  .object({ type: z.literal('function_call'), id: z.string(), call_id: z.string(), name: z.string(), arguments: z.string(), status: z.enum(['in_progress', 'completed', 'incomplete']) })
  .strict();

/** The `response` object (OpenAI's Responses API), with `usage.cost_coins` added. */
export const responseSchema = z
  .object({
    id: z.string(),
    object: z.literal('response'),
    created_at: z.number().int(),
    status: z.enum(['in_progress', 'completed', 'incomplete']),
    error: z.null(),
    incomplete_details: z.object({ reason: z.literal('max_output_tokens') }).strict().nullable(),
    instructions: z.string().nullable(),
    max_output_tokens: z.number().int().nullable(),
    model: z.string(),
    output: z.array(z.union([messageOutput, functionCallOutput])),
    output_text: z.string().describe('all output_text parts joined, as the SDKs offer it'),
    parallel_tool_calls: z.boolean(),
    temperature: z.number().nullable(),
    top_p: z.number().nullable(),
    tool_choice: z.unknown(),
    tools: z.array(z.unknown()),
    text: z.object({ format: z.unknown() }).strict(),
    truncation: z.literal('disabled'),
    store: z.literal(false),
    background: z.literal(false),
    previous_response_id: z.null(),
    reasoning: z.null(),
    metadata: z.record(z.string(), z.string()),
    user: z.string().nullable(),
    usage: responseUsageSchema.nullable(),
  })
  .strict();
export type ResponseObject = z.infer<typeof responseSchema>;
type OutputItem = ResponseObject['output'][number];

/** What chat answers, in the chat-completions format (its views): read here loosely, as any client would. */
interface ChatUsageOut {
  prompt_tokens: number;
  completion_tokens: number;
  cost_coins: number;
}
interface ToolCallOut {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}
interface CompletionOut {
  id: string;
  created: number;
  model: string;
  choices: { message: { content: string | null; tool_calls?: ToolCallOut[] | null }; finish_reason: string }[];
  usage: ChatUsageOut;
}
interface ChunkOut {
  id: string;
  created: number;
  model: string;
  choices: { delta: { content?: string | null; tool_calls?: ToolCallOut[] | null }; finish_reason: string | null }[];
  usage?: ChatUsageOut;
}

export const responseId = (chatId: string) => chatId.replace(/^chatcmpl-/, 'resp_');
const usageOf = (u: ChatUsageOut): z.infer<typeof responseUsageSchema> => ({
  input_tokens: u.prompt_tokens,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: u.completion_tokens,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: u.prompt_tokens + u.completion_tokens,
  cost_coins: u.cost_coins,
});

/** The parts of a response that echo its request. */
function echo(r: ResponsesRequest) {
  return {
    error: null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    temperature: r.temperature ?? null,
    top_p: r.top_p ?? null,
    tool_choice: r.tool_choice ?? 'auto',
    tools: (r.tools ?? []).map((t) => ({ type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null })),
    text: { format: r.text?.format ?? { type: 'text' } },
    truncation: 'disabled' as const,
    store: false as const,
    background: false as const,
    previous_response_id: null,
    reasoning: null,
    metadata: r.metadata ?? {},
    user: r.user ?? null,
  };
}

function responseOf(r: ResponsesRequest, chat: { id: string; created: number; model: string }, output: OutputItem[], finish: string | null, usage: ChatUsageOut | null, status?: ResponseObject['status']): ResponseObject {
  const incomplete = finish === 'length';
  return {
    id: responseId(chat.id),
    object: 'response',
    created_at: chat.created,
    status: status ?? (incomplete ? 'incomplete' : 'completed'),
    incomplete_details: incomplete && !status ? { reason: 'max_output_tokens' } : null,
    model: chat.model,
    output,
    output_text: output.flatMap((o) => (o.type === 'message' ? o.content.map((c) => c.text) : [])).join(''),
    ...echo(r),
    usage: usage ? usageOf(usage) : null,
  };
}

const suffix = (chatId: string) => chatId.replace(/^chatcmpl-/, '');
const messageItemId = (chatId: string) => `msg_${suffix(chatId)}`;
const callItemId = (chatId: string, i: number) => `fc_${suffix(chatId)}_${i}`;

/** A finished chat.completion as a `response`. */
export function responseFromCompletion(r: ResponsesRequest, c: CompletionOut): ResponseObject {
  const choice = c.choices[0]!;
  const output: OutputItem[] = [];
  const status = choice.finish_reason === 'length' ? 'incomplete' : 'completed';
  if (choice.message.content) {
    output.push({ type: 'message', id: messageItemId(c.id), status, role: 'assistant', content: [{ type: 'output_text', text: choice.message.content, annotations: [], logprobs: [] }] });
  }
  (choice.message.tool_calls ?? []).forEach((call, i) => {
    output.push({ type: 'function_call', id: callItemId(c.id, i), call_id: call.id ?? '', name: call.function?.name ?? '', arguments: call.function?.arguments ?? '', status: 'completed' });
  });
  return responseOf(r, c, output, choice.finish_reason, c.usage);
}

/**
 * The chunks of a streamed chat as the Responses stream: `response.created` and
 * `response.in_progress`; for text, `response.output_item.added` (a message),
 * `response.content_part.added`, `response.output_text.delta`…; for each tool call,
 * `response.output_item.added` (a function_call) and `response.function_call_arguments.delta`…;
 * then each item's `.done` events and `response.completed` (or `response.incomplete` at the
 * output limit) with the usage and its cost. Every event has its `sequence_number`.
 */
export async function* responseEvents(r: ResponsesRequest, chunks: AsyncIterable<unknown>): AsyncGenerator<Record<string, unknown>, void, undefined> {
  let seq = 0;
  const ev = (type: string, body: Record<string, unknown>) => ({ type, sequence_number: seq++, ...body });
  let chat: { id: string; created: number; model: string } | null = null;
  const output: OutputItem[] = [];
  let message: { index: number; text: string } | null = null;
  /** The tool calls by their chunk index: their output index and what has come of them. */
  const calls = new Map<number, { index: number; item: Extract<OutputItem, { type: 'function_call' }> }>();
  let finish: string | null = null;
  let usage: ChatUsageOut | null = null;

  for await (const raw of chunks) {
    const chunk = raw as ChunkOut;
    if (!chat) {
      chat = { id: chunk.id, created: chunk.created, model: chunk.model };
      const started = responseOf(r, chat, [], null, null, 'in_progress');
      yield ev('response.created', { response: started });
      yield ev('response.in_progress', { response: started });
    }
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    const content = choice.delta.content;
    if (content) {
      if (!message) {
        message = { index: output.length, text: '' };
        const item: OutputItem = { type: 'message', id: messageItemId(chat.id), status: 'in_progress', role: 'assistant', content: [] };
        output.push(item);
        yield ev('response.output_item.added', { output_index: message.index, item });
        yield ev('response.content_part.added', { item_id: item.id, output_index: message.index, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
      }
      message.text += content;
      yield ev('response.output_text.delta', { item_id: messageItemId(chat.id), output_index: message.index, content_index: 0, delta: content, logprobs: [] });
    }
    for (const call of choice.delta.tool_calls ?? []) {
      const key = call.index ?? 0;
      let open = calls.get(key);
      if (!open) {
        const item: Extract<OutputItem, { type: 'function_call' }> = { type: 'function_call', id: callItemId(chat.id, calls.size), call_id: call.id ?? '', name: call.function?.name ?? '', arguments: '', status: 'in_progress' };
        open = { index: output.length, item };
        calls.set(key, open);
        output.push(item);
        yield ev('response.output_item.added', { output_index: open.index, item: { ...item } });
      }
      const delta = call.function?.arguments ?? '';
      if (delta) {
        open.item.arguments += delta;
        yield ev('response.function_call_arguments.delta', { item_id: open.item.id, output_index: open.index, delta });
      }
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  if (!chat) return;

  const status = finish === 'length' ? 'incomplete' : 'completed';
  if (message) {
    const part = { type: 'output_text' as const, text: message.text, annotations: [], logprobs: [] };
    const item: OutputItem = { type: 'message', id: messageItemId(chat.id), status, role: 'assistant', content: [part] };
    output[message.index] = item;
    yield ev('response.output_text.done', { item_id: item.id, output_index: message.index, content_index: 0, text: message.text, logprobs: [] });
    yield ev('response.content_part.done', { item_id: item.id, output_index: message.index, content_index: 0, part });
    yield ev('response.output_item.done', { output_index: message.index, item });
  }
  for (const { index, item } of calls.values()) {
    item.status = 'completed';
    yield ev('response.function_call_arguments.done', { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
    yield ev('response.output_item.done', { output_index: index, item: { ...item } });
  }
  const done = responseOf(r, chat, output, finish, usage);
  yield ev(done.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: done });
}

/** POST /responses: a `response`, or its stream events when `stream` is true. */
export async function createResponse(deps: CoreDeps, em: EntityManager, principal: Principal, request: ResponsesRequest, signal: AbortSignal) {
  const parsed = chatRequestSchema.safeParse(toChatBody(request));
  if (!parsed.success) throw refusalOf(parsed.error);
  const result = await chatCompletion(deps, em, principal, parsed.data, signal, { kind: 'response', id: responseId });
  if (result.stream) return { stream: true as const, events: responseEvents(request, result.chunks) };
  return { stream: false as const, response: responseFromCompletion(request, result.completion as unknown as CompletionOut) };
}
