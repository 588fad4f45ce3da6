import { z } from 'zod';
import { CoreError } from '../errors.ts';

/**
 * POST /chat/completions, in the OpenAI chat-completions format (SPEC part 4). Text only.
 * Harmless fields the OpenAI clients send are passed on (stop, seed, penalties, user) or
 * ignored (metadata, store, service_tier…); fields that would change the shape of the answer
 * and are not supported get a 400 that names them.
 */
const textPart = z.object({ type: z.literal('text'), text: z.string() });

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
    .transform((parts) => parts.map((p) => (p as z.infer<typeof textPart>).text).join('')),
]);

const message = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant'], {
    error: "must be one of 'system', 'developer', 'user', 'assistant' (tool messages are not supported)",
  }),
  content,
  name: z.string().max(64).optional(),
});
export type ChatMessage = z.output<typeof message>;

const positiveInt = z.number().int().positive();

/** OpenAI's own limit on the number of messages in one request. */
export const MAX_MESSAGES = 2048;

export const chatRequestSchema = z
  .object({
    model: z.string().min(1),
    messages: z.array(message).min(1, 'must contain at least one message').max(MAX_MESSAGES, `must contain at most ${MAX_MESSAGES} messages`),
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
    n: z.number().int().nullish(),
    // Accepted so their presence can be refused by name below.
    tools: z.unknown().optional(),
    tool_choice: z.unknown().optional(),
    functions: z.unknown().optional(),
    function_call: z.unknown().optional(),
    response_format: z.unknown().optional(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.unknown().optional(),
    audio: z.unknown().optional(),
    modalities: z.array(z.string()).nullish(),
    prediction: z.unknown().optional(),
  })
  .transform((r, ctx) => {
    const refuse = (param: string, message: string) => ctx.addIssue({ code: 'custom', path: [param], message });
    if (r.max_tokens != null && r.max_completion_tokens != null) refuse('max_completion_tokens', 'send max_tokens or max_completion_tokens, not both');
    if (r.n != null && r.n !== 1) refuse('n', 'only n = 1 is supported');
    for (const key of ['tools', 'tool_choice', 'functions', 'function_call', 'audio', 'prediction', 'top_logprobs'] as const) {
      if (r[key] != null) refuse(key, 'is not supported');
    }
    if (r.logprobs) refuse('logprobs', 'is not supported');
    if (r.response_format != null && (r.response_format as { type?: unknown }).type !== 'text') refuse('response_format', "only {\"type\":\"text\"} is supported");
    if (r.modalities && r.modalities.some((m) => m !== 'text')) refuse('modalities', "only ['text'] is supported");
    if (r.stream_options && !r.stream) refuse('stream_options', 'is only allowed when stream is true');
    return {
      model: r.model,
      messages: r.messages,
      maxTokens: r.max_tokens ?? r.max_completion_tokens ?? undefined,
      maxTokensParam: r.max_completion_tokens != null ? ('max_completion_tokens' as const) : ('max_tokens' as const),
      stream: r.stream ?? false,
      includeUsage: r.stream_options?.include_usage ?? false,
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

/** `atLeast`: inputTokens is a lower bound (counting stopped once the messages could not fit). */
export function contextTooLong(inputTokens: number, maxTokens: number, contextWindow: number, atLeast = false): CoreError {
  return new CoreError(
    'invalid_request',
    `This model's context window is ${contextWindow} tokens; the messages use ${atLeast ? 'at least ' : ''}${inputTokens} and the output limit is ${maxTokens}. Shorten the messages or lower max_tokens.`,
    { param: 'messages', reason: 'context_length_exceeded' },
  );
}
