import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { ProviderError, type ChatProvider, type ProviderChatRequest, type ProviderEvent } from '../../core/chat/provider.ts';

/**
 * An upstream that speaks the OpenAI chat-completions protocol: OpenAI, OpenRouter, vLLM,
 * Ollama, llama.cpp's server. Always streams (with `stream_options.include_usage`, so usage
 * comes back when the upstream supports it), so one code path serves streamed and
 * non-streamed requests and a stalled upstream is noticed between chunks. Node's fetch keeps
 * connections to the upstream alive between requests.
 */
export interface OpenAiCompatibleConfig {
  baseUrl: string;
  apiKey?: string | undefined;
  /** Longest wait for the response headers, and between two chunks. */
  timeoutMs: number;
  headers?: Record<string, string>;
}

export function openaiCompatibleProvider(config: OpenAiCompatibleConfig): ChatProvider {
  const url = `${config.baseUrl.replace(/\/+$/, '')}/chat/completions`;
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      const timeout = new AbortController();
      let timer = setTimeout(() => timeout.abort(), config.timeoutMs);
      const restartTimer = () => {
        clearTimeout(timer);
        timer = setTimeout(() => timeout.abort(), config.timeoutMs);
      };
      const combined = AbortSignal.any([signal, timeout.signal]);
      const fail = (err: unknown): never => {
        if (timeout.signal.aborted && !signal.aborted) throw new ProviderError('timeout', `no answer within ${config.timeoutMs / 1000} s`);
        if (err instanceof ProviderError) throw err;
        if (signal.aborted) throw err;
        throw new ProviderError('failed', `could not reach the upstream (${(err as Error).message})`);
      };
      try {
        let response: Response;
        try {
          response = await fetch(url, {
            method: 'POST',
            signal: combined,
            headers: {
              'content-type': 'application/json',
              accept: 'text/event-stream',
              ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
              ...config.headers,
            },
            body: JSON.stringify({
              model: request.model,
              messages: request.messages.map((m) => ({ role: m.role, content: m.content, ...(m.name ? { name: m.name } : {}) })),
              max_tokens: request.maxTokens,
              ...request.options,
              stream: true,
              stream_options: { include_usage: true },
            }),
          });
        } catch (err) {
          return fail(err);
        }
        if (!response.ok || !response.body) {
          const text = await response.text().catch(() => '');
          throw new ProviderError('failed', `upstream answered ${response.status}${upstreamMessage(text)}`, response.status);
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
              upstreamError ??= new ProviderError('failed', 'upstream sent an unreadable event');
              return;
            }
            if (payload.error) {
              upstreamError ??= new ProviderError('failed', `upstream error${upstreamMessage(JSON.stringify(payload))}`);
              return;
            }
            for (const choice of payload.choices ?? []) {
              const content = choice.delta?.content ?? choice.message?.content;
              if (typeof content === 'string' && content.length > 0) queue.push({ type: 'delta', content });
              if (choice.finish_reason) {
                finished = true;
                queue.push({ type: 'finish', reason: choice.finish_reason });
              }
            }
            if (payload.usage) {
              queue.push({ type: 'usage', promptTokens: num(payload.usage.prompt_tokens), completionTokens: num(payload.usage.completion_tokens) });
            }
          },
        });

        const decoder = new TextDecoder();
        const reader = response.body.getReader();
        try {
          while (!done) {
            let chunk: Awaited<ReturnType<typeof reader.read>>;
            try {
              chunk = await reader.read();
            } catch (err) {
              return fail(err);
            }
            restartTimer();
            if (chunk.done) break;
            parser.feed(decoder.decode(chunk.value, { stream: true }));
            while (queue.length > 0) yield queue.shift()!;
            if (upstreamError) throw upstreamError;
          }
          // Some servers end without [DONE]; a finish_reason already said the answer is whole.
          if (!done && !finished) throw new ProviderError('failed', 'upstream closed the stream before it finished');
        } finally {
          await reader.cancel().catch(() => undefined);
        }
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

interface UpstreamChunk {
  choices?: { delta?: { content?: unknown }; message?: { content?: unknown }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
  error?: unknown;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** A short, single-line excerpt of what the upstream said, for the client's error message. */
function upstreamMessage(text: string): string {
  let message = text;
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const candidate = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? parsed.message);
    if (typeof candidate === 'string') message = candidate;
  } catch {
    // not JSON: keep the text
  }
  message = message.replace(/\s+/g, ' ').trim().slice(0, 300);
  return message ? `: ${message}` : '';
}
