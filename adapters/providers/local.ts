import { createHash } from 'node:crypto';
import { generateSync } from 'json-schema-faker';
import { isValidAgainst } from '../../core/chat/json-schema.ts';
import { o200k } from '../../core/chat/tokenizer.ts';
import { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent, type ToolSpec } from '../../core/ports.ts';

/**
 * The built-in offline provider behind the demo models. Deterministic: the same request gives
 * the same answer. The answer echoes the last user message, then continues with words drawn
 * from a seeded generator, and stops at the output limit (finish_reason "length"), at a stop
 * sequence or at a length chosen by the seed ("stop"). The completion's usage is counted with
 * the same tokenizer as billing, on exactly what is returned; the prompt's is left to core's count.
 *
 * Tools and structured outputs (docs/chat.md, "The demo model"):
 * - the last message is a tool result: a text answer quoting it;
 * - tools given and not `tool_choice: "none"`: a call of each tool the last user message names
 *   (only the first with `parallel_tool_calls: false`), of the forced tool, or of the first
 *   tool when "required" and none is named, with arguments sampled from the tool's parameters
 *   (json-schema-faker, seeded) and checked with Ajv; finish_reason "tool_calls";
 * - `json_schema`: content is an instance of the schema (sampled the same way); `json_object`: a JSON object.
 *
 * Upstream model names: `echo` answers at once; `echo-slow` waits 50 ms between chunks (for
 * tests and demos of streaming).
 */
const WORDS = (
  'the model access service answers every request with care and counts each token it spends ' +
  'coins move from wallet to ledger in one transaction so nothing is lost and nothing is paid twice ' +
  'streams arrive chunk by chunk while the reservation waits for its settlement'
).split(' ');
const PLAIN = { disallowedSpecial: new Set<string>() };

interface Call {
  id: string;
  name: string;
  arguments: string;
}

export function localProvider(): ChatProvider {
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      const delayMs = request.model === 'echo-slow' ? 50 : 0;
      const pause = async () => {
        if (signal.aborted) throw signal.reason ?? new Error('aborted');
        if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      };
      const plain = !request.tools?.length && !request.responseFormat;
      const seed = createHash('sha256').update(JSON.stringify(plain ? request.messages : [request.messages, request.tools ?? [], request.responseFormat])).digest();
      const calls = await toolCalls(request, seed);
      let budget = request.maxTokens;
      if (calls.length > 0) {
        let length = false;
        for (const [index, call] of calls.entries()) {
          if (budget <= 0) break;
          await pause();
          yield { type: 'tool_call', index, id: call.id, name: call.name, arguments: '' };
          budget -= o200k().encode(call.name, PLAIN).length;
          const args = o200k().encode(call.arguments, PLAIN);
          const kept = args.slice(0, Math.max(0, budget));
          length ||= kept.length < args.length;
          budget -= kept.length;
          for (let i = 0; i < kept.length; i += 4) {
            await pause();
            yield { type: 'tool_call', index, arguments: o200k().decode(kept.slice(i, i + 4)) };
          }
        }
        yield { type: 'finish', reason: length || budget < 0 ? 'length' : 'tool_calls' };
        yield { type: 'usage', completionTokens: request.maxTokens - Math.max(0, budget) };
        return;
      }
      const { text, finishReason } = await answer(request, seed);
      const tokens = o200k().encode(text, PLAIN);
      // Stream a few tokens per chunk, as real upstreams do.
      for (let i = 0; i < tokens.length; i += 4) {
        await pause();
        yield { type: 'delta', content: o200k().decode(tokens.slice(i, i + 4)) };
      }
      yield { type: 'finish', reason: finishReason };
      // The prompt is not counted again here: core's own count (bounded in time) is billed.
      yield { type: 'usage', completionTokens: tokens.length };
    },
  };
}

/** The calls to make, if the request's tools and last message ask for any. */
async function toolCalls(request: ProviderChatRequest, seed: Buffer): Promise<Call[]> {
  const tools = request.tools ?? [];
  const last = request.messages.at(-1);
  if (tools.length === 0 || request.toolChoice === 'none' || last?.role === 'tool') return [];
  const choice = request.toolChoice;
  let chosen: ToolSpec[];
  if (typeof choice === 'object') {
    chosen = tools.filter((t) => t.name === choice.name);
  } else {
    const said = last?.role === 'user' ? last.content.toLowerCase() : '';
    chosen = tools.filter((t) => said.includes(t.name.toLowerCase()));
    if (chosen.length === 0 && choice === 'required') chosen = [tools[0]!];
  }
  if (request.parallelToolCalls === false) chosen = chosen.slice(0, 1);
  const calls: Call[] = [];
  for (const [i, tool] of chosen.entries()) {
    calls.push({
      id: `call_${createHash('sha256').update(seed).update(`${i}:${tool.name}`).digest('base64url').replace(/[-_]/g, '').slice(0, 24)}`,
      name: tool.name,
      arguments: JSON.stringify(await instanceOf(tool.parameters ?? { type: 'object', properties: {} }, seed.readUInt32BE(0) + i, `the parameters of ${tool.name}`)),
    });
  }
  return calls;
}

/**
 * An instance of the schema: json-schema-faker with a seed from the request, checked with
 * Ajv; a few seeds are tried. A schema the sampler cannot satisfy (or that would make a huge
 * instance) is this demo model's failure, not the client's: an upstream error, nothing charged.
 */
async function instanceOf(schema: Record<string, unknown>, seed: number, what: string): Promise<unknown> {
  const tooBig = hugeInstance(schema);
  if (tooBig) throw new ProviderError('failed', `the demo model cannot make an instance of ${what}: ${tooBig}`);
  for (let attempt = 0; attempt < 5; attempt++) {
    let value: unknown;
    try {
      value = generateSync(schema as never, { seed: seed + attempt, maxDepth: 8, maxDefaultItems: 2, refDepthMax: 3, alwaysFakeOptionals: false, optionalsProbability: 0.5 });
    } catch {
      continue;
    }
    if (await isValidAgainst(schema, value)) return value;
  }
  throw new ProviderError('failed', `the demo model could not make an instance valid against ${what}`);
}

/**
 * Keeps the sampler bounded: a schema whose instances must hold very many items (minItems,
 * multiplied down nested arrays), characters or properties is refused. Iterative, like core's
 * shape check; the schema's depth is already bounded by core.
 */
function hugeInstance(schema: unknown): string | undefined {
  const stack: [unknown, number][] = [[schema, 1]];
  while (stack.length > 0) {
    const [node, copies] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    const n = node as Record<string, unknown>;
    const atLeast = (key: string) => (typeof n[key] === 'number' ? (n[key] as number) : 0);
    if (atLeast('minLength') > 4096 || atLeast('minProperties') > 256) return 'it needs too long a string or too many properties';
    // A pattern's repetition counts make strings as long as they say: refused above 3 digits.
    if (typeof n.pattern === 'string' && /\{\d{4,}/.test(n.pattern)) return 'its pattern repeats more than 999 times';
    const items = copies * Math.max(1, atLeast('minItems'));
    if (items > 10_000) return 'it needs more than 10,000 array items';
    for (const [key, value] of Object.entries(n)) stack.push([value, key === 'items' || key === 'prefixItems' ? items : copies]);
  }
  return undefined;
}

async function answer(request: ProviderChatRequest, seed: Buffer): Promise<{ text: string; finishReason: 'stop' | 'length' }> {
  const full = cutAtStop(await fullText(request, seed), request.options.stop);
  const tokens = o200k().encode(full, PLAIN);
  if (tokens.length <= request.maxTokens) return { text: full, finishReason: 'stop' };
  return { text: o200k().decode(tokens.slice(0, request.maxTokens)), finishReason: 'length' };
}

async function fullText(request: ProviderChatRequest, seed: Buffer): Promise<string> {
  const last = request.messages.at(-1);
  const lastUser = [...request.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
  const format = request.responseFormat;
  if (format?.type === 'json_schema') return JSON.stringify(await instanceOf(format.schema ?? { type: 'object' }, seed.readUInt32BE(0), `response_format '${format.name}'`));
  if (last?.role === 'tool') {
    const call = request.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.id === last.toolCallId);
    const text = `The tool ${call?.name ?? 'call'} returned: ${last.content.slice(0, 2000)}`;
    return format?.type === 'json_object' ? JSON.stringify({ answer: text }) : text;
  }
  const wanted = 12 + (seed[0]! % 40);
  const words = [`You said: "${lastUser.slice(0, 200)}".`];
  for (let i = 0; i < wanted; i++) words.push(WORDS[seed[(i % 31) + 1]! % WORDS.length]!);
  const text = `${words.join(' ')}.`;
  return format?.type === 'json_object' ? JSON.stringify({ answer: text }) : text;
}

/** The text before the first stop sequence, as OpenAI cuts it (the sequence itself is not returned). */
function cutAtStop(text: string, stop: string | string[] | undefined): string {
  const sequences = stop === undefined ? [] : typeof stop === 'string' ? [stop] : stop;
  let end = text.length;
  for (const s of sequences) {
    const at = s.length > 0 ? text.indexOf(s) : -1;
    if (at >= 0 && at < end) end = at;
  }
  return text.slice(0, end);
}
