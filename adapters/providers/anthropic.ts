import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { StringDecoder } from 'node:string_decoder';
import { Agent, request as undiciRequest, type Dispatcher } from 'undici';
import { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent } from '../../core/ports.ts';
import { anthropicBody } from './anthropic-request.ts';
import { anthropicHttpError, anthropicStreamError, type AnthropicLog } from './anthropic-errors.ts';
import { UPSTREAM_SAYS } from './upstream-words.ts';

/**
 * Anthropic's Messages API (`POST /v1/messages`, always streamed) as a chat upstream; the
 * translation both ways is in docs/providers.md, "Anthropic". undici rather than the official
 * SDK: the SDK reads the environment on its own (ANTHROPIC_CUSTOM_HEADERS, ANTHROPIC_LOG, a
 * credential chain from config files when no key is set), its time-out bounds only the wait
 * for the response headers, not a stall between two events, and it logs a malformed event
 * raw to the console; here one keep-alive agent bounds both waits, as for
 * openai-compatible.ts, and what the upstream said goes to the operator's `log` only.
 */
export interface AnthropicConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  /** Longest wait for the response headers, and between two streamed events. */
  timeoutMs: number;
  /** The `anthropic-version` header. */
  version: string;
  log?: AnthropicLog | undefined;
}

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** Why Anthropic stopped, as the chat-completions `finish_reason`. */
const FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

export function anthropicProvider(config: AnthropicConfig): ChatProvider {
  const url = `${config.baseUrl.replace(/\/+$/, '')}/v1/messages`;
  const dispatcher = new Agent({ headersTimeout: config.timeoutMs, bodyTimeout: config.timeoutMs, connectTimeout: config.timeoutMs });
  const headers = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    'anthropic-version': config.version,
    ...(config.apiKey ? { 'x-api-key': config.apiKey } : {}),
  };
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      const fail = (err: unknown): never => {
        if (signal.aborted || err instanceof ProviderError) throw err;
        if (TIMEOUT_CODES.has((err as { code?: string }).code ?? '')) {
          config.log?.({ code: (err as { code?: string }).code, seconds: config.timeoutMs / 1000 }, 'Anthropic did not answer in time');
          throw new ProviderError('timeout', UPSTREAM_SAYS.timeout);
        }
        config.log?.({ error: (err as Error).message }, 'could not reach Anthropic');
        throw new ProviderError('failed', UPSTREAM_SAYS.unreachable);
      };
      const { body: requestBody, schemaTool } = anthropicBody(request);
      let response: Dispatcher.ResponseData;
      try {
        response = await undiciRequest(url, { dispatcher, method: 'POST', signal, headers, body: JSON.stringify(requestBody) });
      } catch (err) {
        return fail(err);
      }
      const body = response.body;
      if (response.statusCode < 200 || response.statusCode >= 300) {
        let text = '';
        try {
          text = await body.text();
        } catch (err) {
          return fail(err);
        }
        throw anthropicHttpError(response.statusCode, response.headers, text, config.log);
      }

      const events = new AnthropicEvents(schemaTool, config.log);
      const parser = createParser({ onEvent: (message) => events.read(message) });
      const decoder = new StringDecoder('utf8');
      const chunks = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      let whole = false;
      try {
        while (!events.stopped) {
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
          yield* events.drain();
        }
        if (!events.stopped && !events.finished) {
          config.log?.({}, 'Anthropic closed the stream before the answer was complete');
          throw new ProviderError('failed', UPSTREAM_SAYS.closedEarly);
        }
        yield* events.drain();
      } finally {
        // After message_stop only the end of the response is left: read it so the connection
        // is reused. Anything else (an abort, a failure, a consumer that stopped) drops it.
        if (events.stopped && !whole && !signal.aborted) await body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        else if (!whole) body.destroy();
      }
    },
  };
}

/**
 * The stream's events as the port's: text and tool-use blocks by their index, the stop reason
 * and the usage (input from message_start, output from message_delta) once, at message_delta.
 * The schema tool's input is the answer's text.
 */
class AnthropicEvents {
  stopped = false;
  finished = false;
  private queue: ProviderEvent[] = [];
  private error: ProviderError | undefined;
  private promptTokens: number | undefined;
  private readonly answerBlocks = new Set<number>();
  private otherToolCalls = 0;

  private readonly schemaTool: string | undefined;
  private readonly log: AnthropicLog | undefined;

  constructor(schemaTool: string | undefined, log: AnthropicLog | undefined) {
    this.schemaTool = schemaTool;
    this.log = log;
  }

  *drain(): Generator<ProviderEvent> {
    while (this.queue.length > 0) yield this.queue.shift()!;
    if (this.error) throw this.error;
  }

  read(message: EventSourceMessage): void {
    if (this.error || this.stopped) return;
    let event: AnthropicEvent;
    try {
      event = JSON.parse(message.data) as AnthropicEvent;
    } catch {
      this.log?.({ event: message.event, data: message.data.slice(0, 500) }, 'Anthropic sent an unreadable event');
      this.error = new ProviderError('failed', UPSTREAM_SAYS.unreadable);
      return;
    }
    const type = event.type ?? message.event;
    if (type === 'error' || message.event === 'error') {
      this.error = anthropicStreamError(event, this.log);
      return;
    }
    if (type === 'message_start') {
      const u = event.message?.usage;
      const parts = [u?.input_tokens, u?.cache_creation_input_tokens, u?.cache_read_input_tokens].filter((n): n is number => typeof n === 'number');
      this.promptTokens = parts.length > 0 ? parts.reduce((a, b) => a + b, 0) : undefined;
    } else if (type === 'content_block_start') {
      this.blockStart(num(event.index) ?? 0, event.content_block);
    } else if (type === 'content_block_delta') {
      this.blockDelta(num(event.index) ?? 0, event.delta);
    } else if (type === 'message_delta') {
      const stop = event.delta?.stop_reason;
      if (typeof stop === 'string') {
        const answeredBySchema = stop === 'tool_use' && this.answerBlocks.size > 0 && this.otherToolCalls === 0;
        this.queue.push({ type: 'finish', reason: answeredBySchema ? 'stop' : (FINISH[stop] ?? 'stop') });
        this.finished = true;
      }
      this.queue.push({ type: 'usage', promptTokens: this.promptTokens, completionTokens: num(event.usage?.output_tokens) });
    } else if (type === 'message_stop') {
      this.stopped = true;
    }
    // ping, content_block_stop and event types added later carry nothing for the chat format.
  }

  private blockStart(index: number, block: AnthropicEvent['content_block']): void {
    if (block?.type === 'text' && typeof block.text === 'string' && block.text !== '') {
      this.queue.push({ type: 'delta', content: block.text });
    } else if (block?.type === 'tool_use') {
      if (this.schemaTool !== undefined && block.name === this.schemaTool) {
        this.answerBlocks.add(index);
        return;
      }
      this.otherToolCalls++;
      this.queue.push({ type: 'tool_call', index, id: str(block.id), name: str(block.name), arguments: '' });
    }
  }

  private blockDelta(index: number, delta: AnthropicEvent['delta']): void {
    if (delta?.type === 'text_delta' && typeof delta.text === 'string') {
      this.queue.push({ type: 'delta', content: delta.text });
    } else if (delta?.type === 'input_json_delta' && typeof delta.partial_json === 'string') {
      if (this.answerBlocks.has(index)) this.queue.push({ type: 'delta', content: delta.partial_json });
      else this.queue.push({ type: 'tool_call', index, arguments: delta.partial_json });
    }
    // thinking, signature and citations deltas have no place in the chat format.
  }
}

interface AnthropicEvent {
  type?: string;
  index?: unknown;
  message?: { usage?: { input_tokens?: unknown; cache_creation_input_tokens?: unknown; cache_read_input_tokens?: unknown } };
  content_block?: { type?: string; text?: unknown; id?: unknown; name?: unknown };
  delta?: { type?: string; text?: unknown; partial_json?: unknown; stop_reason?: unknown };
  usage?: { output_tokens?: unknown };
  error?: { type?: unknown; message?: unknown };
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}
