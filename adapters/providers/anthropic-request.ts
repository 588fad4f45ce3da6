import { ProviderError, type ChatMessageIn, type ProviderChatRequest, type ToolChoice } from '../../core/ports.ts';

/**
 * The chat-completions request as an Anthropic Messages API body (docs/providers.md,
 * "Anthropic"): `system` and `developer` messages become the system prompt, tool results user
 * messages of `tool_result` blocks, and consecutive messages of one role one message, as the
 * API requires alternating roles. Options Anthropic has no field for (seed, presence and
 * frequency penalties) are not sent. A `json_schema` response format is a forced tool whose
 * input is the answer (`schemaTool` names it, so the stream turns its input back into text);
 * `json_object` is an instruction in the system prompt.
 */
export interface AnthropicBody {
  body: Record<string, unknown>;
  /** The tool that stands for a json_schema response format, if any. */
  schemaTool: string | undefined;
}

type Block = Record<string, unknown>;
interface Message {
  role: 'user' | 'assistant';
  content: Block[];
}

export const JSON_OBJECT_INSTRUCTION = 'Answer with a single JSON object and nothing else: no prose before or after it, no code fences.';

export function anthropicBody(request: ProviderChatRequest): AnthropicBody {
  const system: string[] = [];
  const messages: Message[] = [];
  for (const m of request.messages) {
    if (m.role === 'system' || m.role === 'developer') {
      if (m.content !== '') system.push(m.content);
      continue;
    }
    const role = m.role === 'assistant' ? 'assistant' : 'user';
    const blocks = contentBlocks(m);
    const last = messages.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  }

  const format = request.responseFormat;
  if (format?.type === 'json_object') system.push(JSON_OBJECT_INSTRUCTION);
  const schemaTool = format?.type === 'json_schema' ? format.name : undefined;

  const tools: Block[] = (request.tools ?? []).map((t) => ({
    name: t.name,
    ...(t.description !== undefined && { description: t.description }),
    input_schema: t.parameters ?? { type: 'object', properties: {} },
  }));
  if (format?.type === 'json_schema') {
    tools.push({
      name: format.name,
      description: format.description ?? 'Give your answer as the input of this tool: it must match the schema.',
      input_schema: format.schema ?? { type: 'object' },
    });
  }
  const toolChoice = anthropicToolChoice(request, schemaTool);

  const { temperature, top_p, stop, user } = request.options;
  const stops = stop === undefined ? [] : Array.isArray(stop) ? stop : [stop];
  return {
    schemaTool,
    body: {
      model: request.model,
      max_tokens: request.maxTokens,
      ...(system.length > 0 && { system: system.join('\n\n') }),
      messages,
      ...(temperature !== undefined && { temperature }),
      ...(top_p !== undefined && { top_p }),
      ...(stops.length > 0 && { stop_sequences: stops }),
      ...(user !== undefined && { metadata: { user_id: user } }),
      ...(tools.length > 0 && { tools }),
      ...(toolChoice !== undefined && { tool_choice: toolChoice }),
      stream: true,
    },
  };
}

function contentBlocks(m: ChatMessageIn): Block[] {
  if (m.role === 'tool') {
    return [{ type: 'tool_result', tool_use_id: m.toolCallId ?? '', content: m.content }];
  }
  // Anthropic refuses empty text blocks: an assistant turn of tool calls alone has none.
  const blocks: Block[] = m.content !== '' || m.role !== 'assistant' ? [{ type: 'text', text: m.content }] : [];
  for (const call of m.toolCalls ?? []) {
    blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: toolInput(call.name, call.arguments) });
  }
  return blocks;
}

/** A tool call's arguments (JSON text) as the object Anthropic's `tool_use.input` is. */
function toolInput(name: string, args: string): unknown {
  let input: unknown;
  try {
    input = args.trim() === '' ? {} : JSON.parse(args);
  } catch {
    input = undefined;
  }
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new ProviderError('refused', `the arguments of the earlier call of tool "${name}" are not a JSON object`, undefined, { code: 'invalid_input' });
  }
  return input;
}

/**
 * The client's tool choice in Anthropic's words. A json_schema format forces its tool unless
 * the client's own tools are offered too: then the model may call those or answer (through
 * the schema tool), so a client's choice stays as it is.
 */
function anthropicToolChoice(request: ProviderChatRequest, schemaTool: string | undefined): Block | undefined {
  const ownTools = (request.tools ?? []).length > 0;
  const single = request.parallelToolCalls === false ? { disable_parallel_tool_use: true } : {};
  if (schemaTool !== undefined && !ownTools) return { type: 'tool', name: schemaTool };
  const choice: ToolChoice | undefined = request.toolChoice;
  if (!ownTools && schemaTool === undefined) return undefined;
  if (choice === 'none') return { type: 'none' };
  if (choice === 'required') return { type: 'any', ...single };
  if (typeof choice === 'object') return { type: 'tool', name: choice.name, ...single };
  if (choice === 'auto' || request.parallelToolCalls === false) return { type: 'auto', ...single };
  return undefined;
}
