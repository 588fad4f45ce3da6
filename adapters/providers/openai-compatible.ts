import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { StringDecoder } from 'node:string_decoder';
import { Agent, request as undiciRequest, type Dispatcher } from 'undici';
import { ProviderError, type ChatMessageIn, type ChatProvider, type ProviderChatRequest, type ProviderEvent } from '../../core/ports.ts';
import { forLog, retryAfterMs } from './media/upstream-limits.ts';
import { UPSTREAM_SAYS } from './upstream-words.ts';

/**
 * An upstream that speaks the OpenAI chat-completions protocol: OpenAI, OpenRouter, vLLM,
 * Ollama, llama.cpp's server. Always streams (with `stream_options.include_usage`, so usage
 * comes back when the upstream supports it), so one code path serves streamed and
 * non-streamed requests and a stalled upstream is noticed between chunks. Requests go through
 * undici's `request` on one keep-alive agent per upstream: far less work per call than
 * `fetch` (no WHATWG streams, no per-request abort controllers for the timeouts).
 */
export interface OpenAiCompatibleConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  /** Longest wait for the response headers, and between two chunks. */
  timeoutMs: number;
  headers?: Record<string, string>;
  /** The operator's log, for what the upstream said (never shown to customers: ProviderError messages are our words). */
  log?: ((fields: Record<string, unknown>, message: string) => void) | undefined;
}

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

export function openaiCompatibleProvider(config: OpenAiCompatibleConfig): ChatProvider {
  const url = `${config.baseUrl.replace(/\/+$/, '')}/chat/completions`;
  const dispatcher = new Agent({ headersTimeout: config.timeoutMs, bodyTimeout: config.timeoutMs, connectTimeout: config.timeoutMs });
  const headers = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
    ...config.headers,
  };
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      const log = (fields: Record<string, unknown>, message: string) => config.log?.({ upstream: url, ...fields }, message);
      const fail = (err: unknown): never => {
        if (signal.aborted) throw err;
        if (err instanceof ProviderError) throw err;
        if (TIMEOUT_CODES.has((err as { code?: string }).code ?? '')) {
          log({ code: (err as { code?: string }).code }, 'chat upstream: timed out');
          throw new ProviderError('timeout', UPSTREAM_SAYS.timeout);
        }
        log({ error: forLog((err as Error).message, config.apiKey) }, 'chat upstream: unreachable');
        throw new ProviderError('failed', UPSTREAM_SAYS.unreachable);
      };
      let response: Dispatcher.ResponseData;
      try {
        response = await undiciRequest(url, {
          dispatcher,
          method: 'POST',
          signal,
          headers,
          body: JSON.stringify(upstreamBody(request)),
        });
      } catch (err) {
        return fail(err);
      }
      const body = response.body;
      if (response.statusCode < 200 || response.statusCode >= 300) {
        const text = await body.text().catch(() => '');
        log({ status: response.statusCode, upstreamBody: forLog(text, config.apiKey) }, 'chat upstream: error answer');
        throw statusError(response.statusCode, response.headers, text);
      }

      const queue: ProviderEvent[] = [];
      let upstreamError: ProviderError | undefined;
      let done = false;
      let finished = false;
      const parser = createParser({
        onEvent(message: EventSourceMessage) {
          if (message.data === '[DONE]') {
            done = true;
            return;
          }
          let payload: UpstreamChunk;
          try {
            payload = JSON.parse(message.data) as UpstreamChunk;
          } catch {
            log({ upstreamBody: forLog(message.data, config.apiKey) }, 'chat upstream: unreadable event');
            upstreamError ??= new ProviderError('failed', UPSTREAM_SAYS.unreadable);
            return;
          }
          if (payload.error) {
            log({ upstreamBody: forLog(payload.error, config.apiKey) }, 'chat upstream: error event');
            upstreamError ??= streamedError(payload.error);
            return;
          }
          for (const choice of payload.choices ?? []) {
            const content = choice.delta?.content ?? choice.message?.content;
            if (typeof content === 'string' && content.length > 0) queue.push({ type: 'delta', content });
            const calls = choice.delta?.tool_calls ?? choice.message?.tool_calls;
            if (Array.isArray(calls)) calls.forEach((call, i) => queue.push(toolCallEvent(call, i)));
            if (choice.finish_reason) {
              finished = true;
              queue.push({ type: 'finish', reason: choice.finish_reason });
            }
          }
          if (payload.usage) {
            const costUsd = num(payload.usage.cost);
            queue.push({ type: 'usage', promptTokens: num(payload.usage.prompt_tokens), completionTokens: num(payload.usage.completion_tokens), ...(costUsd !== undefined && costUsd >= 0 && { costUsd }) });
          }
        },
      });

      const decoder = new StringDecoder('utf8');
      const chunks = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      let whole = false;
      try {
        while (!done) {
          let chunk: IteratorResult<Buffer>;
          try {
            chunk = await chunks.next();
          } catch (err) {
            return fail(err);
          }
          if (chunk.done) {
            whole = true;
            break;
          }
          parser.feed(decoder.write(chunk.value));
          while (queue.length > 0) yield queue.shift()!;
          if (upstreamError) throw upstreamError;
        }
        // Some servers end without [DONE]; a finish_reason already said the answer is whole.
        if (!done && !finished) throw new ProviderError('failed', UPSTREAM_SAYS.closedEarly);
        while (queue.length > 0) yield queue.shift()!;
      } finally {
        // After [DONE] only the end of the response is left: read it so the connection is
        // reused. Anything else (an abort, a failure, a consumer that stopped) drops it.
        if (done && !whole && !signal.aborted) await body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        else if (!whole) body.destroy();
      }
    },
  };
}

/** The OpenAI request body: the messages with their tool calls and results, the tools, the response format. */
function upstreamBody(request: ProviderChatRequest): Record<string, unknown> {
  const tools = request.tools ?? [];
  const choice = request.toolChoice;
  const format = request.responseFormat;
  return {
    model: request.model,
    messages: request.messages.map(toUpstreamMessage),
    max_tokens: request.maxTokens,
    ...request.options,
    ...(tools.length > 0 && {
      tools: tools.map((t) => ({
        type: 'function',
        function: {
          name: t.name,
          ...(t.description !== undefined && { description: t.description }),
          ...(t.parameters !== undefined && { parameters: t.parameters }),
          ...(t.strict !== undefined && { strict: t.strict }),
        },
      })),
    }),
    ...(choice !== undefined && { tool_choice: typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } } }),
    ...(request.parallelToolCalls !== undefined && { parallel_tool_calls: request.parallelToolCalls }),
    ...(format !== undefined && {
      response_format:
        format.type === 'json_object'
          ? { type: 'json_object' }
          : {
              type: 'json_schema',
              json_schema: {
                name: format.name,
                ...(format.description !== undefined && { description: format.description }),
                ...(format.schema !== undefined && { schema: format.schema }),
                ...(format.strict !== undefined && { strict: format.strict }),
              },
            },
    }),
    stream: true,
    stream_options: { include_usage: true },
  };
}

function toUpstreamMessage(m: ChatMessageIn): Record<string, unknown> {
  const calls = m.toolCalls ?? [];
  return {
    role: m.role,
    // An assistant message that only calls tools has no content: OpenAI's form is null.
    content: calls.length > 0 && m.content === '' ? null : m.content,
    ...(m.name ? { name: m.name } : {}),
    ...(calls.length > 0 && { tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) }),
    ...(m.toolCallId !== undefined && { tool_call_id: m.toolCallId }),
  };
}

/** A streamed `tool_calls` delta (or a whole call of a non-streamed message) as the port's event. */
function toolCallEvent(call: UpstreamToolCall, position: number): ProviderEvent {
  const name = call.function?.name;
  return {
    type: 'tool_call',
    index: typeof call.index === 'number' ? call.index : position,
    id: typeof call.id === 'string' ? call.id : undefined,
    name: typeof name === 'string' ? name : undefined,
    arguments: typeof call.function?.arguments === 'string' ? call.function.arguments : '',
  };
}

interface UpstreamToolCall {
  index?: unknown;
  id?: unknown;
  function?: { name?: unknown; arguments?: unknown };
}

interface UpstreamChunk {
  choices?: { delta?: { content?: unknown; tool_calls?: UpstreamToolCall[] }; message?: { content?: unknown; tool_calls?: UpstreamToolCall[] }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown; cost?: unknown } | null;
  error?: unknown;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

const CONTENT_POLICY_CODES = new Set(['content_filter', 'content_policy_violation']);

/**
 * An error answer in our words (docs/providers.md, "What each upstream error becomes"): the
 * request's own fault (400, 413, 422) is a refusal, content policy or invalid input, the same
 * on every route; anything else (429, 5xx, 401/403 our key refused, 404 the model unknown there)
 * is the route's failure, which another route may not have. A 429's delay is kept.
 */
function statusError(status: number, headers: Record<string, string | string[] | undefined>, text: string): ProviderError {
  if (status === 400 || status === 413 || status === 422) {
    const code = errorCode(text);
    if (code !== undefined && CONTENT_POLICY_CODES.has(code)) return new ProviderError('refused', UPSTREAM_SAYS.contentPolicy, status, { code: 'content_policy' });
    return new ProviderError('refused', UPSTREAM_SAYS.invalid, status, { code: 'invalid_input' });
  }
  if (status === 429) return new ProviderError('failed', UPSTREAM_SAYS.rateLimited, status, { retryAfterMs: retryAfterMs(toHeaders(headers)) });
  if (status === 401 || status === 403) return new ProviderError('failed', UPSTREAM_SAYS.keyRefused, status);
  if (status === 404) return new ProviderError('failed', UPSTREAM_SAYS.unknownModel, status);
  if (status === 503 || status === 529) return new ProviderError('failed', UPSTREAM_SAYS.overloaded, status, { retryAfterMs: retryAfterMs(toHeaders(headers)) });
  return new ProviderError('failed', UPSTREAM_SAYS.status(status), status);
}

/** An `error` event inside a stream: overloaded or failed (retryable before any output), or a content-policy refusal. */
function streamedError(error: unknown): ProviderError {
  const code = errorCode(JSON.stringify({ error }));
  if (code !== undefined && CONTENT_POLICY_CODES.has(code)) return new ProviderError('refused', UPSTREAM_SAYS.contentPolicy, undefined, { code: 'content_policy' });
  if (code !== undefined && /overloaded/.test(code)) return new ProviderError('failed', UPSTREAM_SAYS.overloaded);
  return new ProviderError('failed', UPSTREAM_SAYS.failedWhileAnswering);
}

/** The error's code (or type) in an OpenAI-style body `{"error":{"code","type"}}`. */
function errorCode(text: string): string | undefined {
  try {
    const parsed = JSON.parse(text) as { error?: { code?: unknown; type?: unknown } };
    const code = parsed.error?.code ?? parsed.error?.type;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}

function toHeaders(raw: Record<string, string | string[] | undefined>): Headers {
  const headers = new Headers();
  for (const [k, v] of Object.entries(raw)) if (typeof v === 'string') headers.set(k, v);
  return headers;
}
