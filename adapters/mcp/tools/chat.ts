import { z } from 'zod';
import { chatMessageSchema, onlyWithTools, responseFormatSchema, toolChoiceSchema, toolsSchema } from '../../../core/chat/schema.ts';
import { chatUsageSchema, toolCallView } from '../../../core/chat/views.ts';
import { coinsSchema } from '../../../core/views.ts';
import { defineTool } from '../tool.ts';

export const chat = defineTool({
  name: 'chat',
  title: 'Chat with a text model',
  description:
    'Asks a text model and returns its answer, the tokens used and what it cost. Paid from the account: the input plus ' +
    '`max_tokens` is reserved at the model\'s prices, and only the tokens used are charged. Give `messages`, or `prompt` for one user message.',
  input: z
    .object({
      model: z.string().min(1).max(200).describe('A text model id from list_models (type "text"), e.g. "mas/echo".'),
      messages: z
        .array(chatMessageSchema)
        .min(1)
        .max(2048)
        .optional()
        .describe('The conversation, oldest first (at most 2048 messages), in the chat-completions format of POST /chat/completions: text content, assistant tool_calls, tool results.'),
      prompt: z.string().min(1).optional().describe('A single user message: the same as messages [{"role":"user","content": prompt}].'),
      max_tokens: z.number().int().min(1).optional().describe("Output limit in tokens; the model's default_max_tokens when omitted."),
      temperature: z.number().min(0).max(2).optional().describe('Sampling temperature, 0 to 2.'),
      top_p: z.number().min(0).max(1).optional().describe('Nucleus sampling, 0 to 1.'),
      tools: toolsSchema.optional().describe('Functions the model may call, as in POST /chat/completions (at most 128).'),
      tool_choice: toolChoiceSchema
        .optional()
        .describe(
          'Only with `tools`: "auto" (the model decides; the default), "none" (no call), "required" (at least one call), or {"type":"function","function":{"name":"…"}} to force that tool. Without `tools` it is refused.',
        ),
      parallel_tool_calls: z
        .boolean()
        .optional()
        .describe('Only with `tools`: false lets the model call at most one tool per answer; true (the default) lets it call several at once. Without `tools` it is refused.'),
      response_format: responseFormatSchema.optional().describe('{"type":"json_object"} or {"type":"json_schema","json_schema":{name,schema}}: the answer is JSON.'),
    })
    // Core's rules for these arguments (core/chat/schema.ts), and this tool's own choice of messages or prompt, as JSON Schema in tools/list.
    .meta({ allOf: [onlyWithTools('tool_choice'), onlyWithTools('parallel_tool_calls'), { description: 'messages or prompt, not both', oneOf: [{ required: ['messages'] }, { required: ['prompt'] }] }] })
    .refine((a) => (a.messages === undefined) !== (a.prompt === undefined), { path: ['messages'], message: 'give messages or prompt, not both and not neither' }),
  output: z.object({
    id: z.string().describe('The chat completion id; the wallet history names it'),
    model: z.string(),
    answer: z.string().describe('the text of the answer ("" when it only calls tools)'),
    tool_calls: z.array(toolCallView).optional().describe('the functions the model calls: run them and send their results as tool messages'),
    finish_reason: z.string().describe('"stop", "tool_calls", or "length" when max_tokens cut the answer'),
    usage: chatUsageSchema,
    cost_coins: coinsSchema.describe('what this call cost'),
  }),
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  async run(args, { core }) {
    const result = await core.chat.complete({
      model: args.model,
      messages: args.messages ?? [{ role: 'user', content: args.prompt! }],
      max_tokens: args.max_tokens,
      temperature: args.temperature,
      top_p: args.top_p,
      tools: args.tools,
      tool_choice: args.tool_choice,
      parallel_tool_calls: args.parallel_tool_calls,
      response_format: args.response_format,
      stream: false,
    });
    if (result.stream) throw new Error('a stream was not asked for');
    const c = result.completion;
    const message = c.choices[0]?.message;
    const answer = message?.content ?? '';
    const calls = message?.tool_calls;
    const called = calls ? calls.map((t) => `${t.function.name}(${t.function.arguments})`).join('\n') : '';
    return {
      structured: { id: c.id, model: c.model, answer, ...(calls && { tool_calls: calls }), finish_reason: c.choices[0]?.finish_reason ?? 'stop', usage: c.usage, cost_coins: c.usage.cost_coins },
      text: `${[answer, called].filter(Boolean).join('\n')}\n\n(${c.usage.prompt_tokens} + ${c.usage.completion_tokens} tokens, ${c.usage.cost_coins} coins)`,
    };
  },
});
