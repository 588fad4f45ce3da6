import { z } from 'zod';
import { CoreError } from '../errors.ts';
import { coinsToJson } from '../money/coins.ts';
import { coinsSchema } from '../views.ts';
import type { ChatEvent, ChatUsage, PreparedChat } from './chat.ts';

export const chatUsageSchema = z
  .object({
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    total_tokens: z.number().int(),
    cost_coins: coinsSchema.describe('the final charge, equal to the `API usage` entry of the wallet history'),
  })
  .strict();

export const toolCallView = z
  .object({
    id: z.string(),
    type: z.literal('function'),
    function: z.object({ name: z.string(), arguments: z.string().describe('JSON text, as the model wrote it') }).strict(),
  })
  .strict();
type ToolCallView = z.infer<typeof toolCallView>;

/** The OpenAI chat.completion object, with `usage.cost_coins` added (SPEC part 2). */
export const chatCompletionSchema = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z
        .object({
          index: z.number().int(),
          message: z
            .object({
              role: z.literal('assistant'),
              content: z.string().nullable().describe('null when the answer is only tool calls'),
              refusal: z.null(),
              tool_calls: z.array(toolCallView).optional().describe('the functions the model calls; finish_reason is then "tool_calls" (or "stop" when tool_choice forced the call)'),
            })
            .strict(),
          logprobs: z.null(),
          finish_reason: z.string(),
        })
        .strict(),
    ),
    usage: chatUsageSchema,
  })
  .strict();

/** The chat-completion objects of the OpenAI format, with `usage.cost_coins` added (SPEC part 2). */
export function usageView(u: ChatUsage): z.infer<typeof chatUsageSchema> {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    cost_coins: coinsToJson(u.cost),
  };
}

export function completionView(chat: PreparedChat, content: string, finishReason: string, usage: ChatUsage, toolCalls: ToolCallView[] = []): z.infer<typeof chatCompletionSchema> {
  const message = toolCalls.length > 0 ? { role: 'assistant' as const, content: content === '' ? null : content, refusal: null, tool_calls: toolCalls } : { role: 'assistant' as const, content, refusal: null };
  return {
    id: chat.id,
    object: 'chat.completion' as const,
    created: chat.created,
    model: chat.model.id,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
    usage: usageView(usage),
  };
}

/** Collects a run into one chat.completion object. */
export async function collectCompletion(chat: PreparedChat, events: AsyncIterable<ChatEvent>) {
  let content = '';
  const toolCalls: ToolCallView[] = [];
  for await (const event of events) {
    if (event.type === 'delta') content += event.content;
    else if (event.type === 'tool_call_start') toolCalls.push({ id: event.id, type: 'function', function: { name: event.name, arguments: '' } });
    else if (event.type === 'tool_call_arguments') toolCalls[event.index]!.function.arguments += event.arguments;
    else return completionView(chat, content, event.finishReason, event.usage, toolCalls);
  }
  // Only a run stopped because the client went away ends without a result.
  throw new CoreError('invalid_request', 'The client closed the request.', { reason: 'client_closed_request' });
}

function chunk(chat: PreparedChat, choices: unknown[], usage?: ReturnType<typeof usageView>) {
  return {
    id: chat.id,
    object: 'chat.completion.chunk' as const,
    created: chat.created,
    model: chat.model.id,
    choices,
    ...(usage ? { usage } : {}),
  };
}

/**
 * A run as `chat.completion.chunk` objects, as OpenAI streams them: the first carries the
 * role, then content deltas; a tool call's first chunk carries its index, id, type, name and
 * arguments "", the next ones its index and pieces of its arguments; then the finish chunk.
 * `usage` with `cost_coins` is in the last chunk: its own chunk with no choices when the
 * client asked for `stream_options.include_usage`, else on the finish chunk.
 */
export async function* streamChunks(chat: PreparedChat, events: AsyncIterable<ChatEvent>) {
  let first = true;
  const choice = (delta: Record<string, unknown>) => [{ index: 0, delta, logprobs: null, finish_reason: null }];
  for await (const event of events) {
    if (event.type === 'delta') {
      const delta = first ? { role: 'assistant', content: event.content } : { content: event.content };
      first = false;
      yield chunk(chat, choice(delta));
    } else if (event.type === 'tool_call_start') {
      const call = { index: event.index, id: event.id, type: 'function', function: { name: event.name, arguments: '' } };
      yield chunk(chat, choice(first ? { role: 'assistant', content: null, tool_calls: [call] } : { tool_calls: [call] }));
      first = false;
    } else if (event.type === 'tool_call_arguments') {
      yield chunk(chat, choice({ tool_calls: [{ index: event.index, function: { arguments: event.arguments } }] }));
    } else {
      const usage = usageView(event.usage);
      const finish = [{ index: 0, delta: first ? { role: 'assistant', content: '' } : {}, logprobs: null, finish_reason: event.finishReason }];
      if (chat.request.includeUsage) {
        yield chunk(chat, finish);
        yield chunk(chat, [], usage);
      } else {
        yield chunk(chat, finish, usage);
      }
    }
  }
}
