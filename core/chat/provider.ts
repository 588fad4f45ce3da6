import type { ChatMessage, ChatOptions } from './schema.ts';

/**
 * What core needs from a text model upstream. Adapters in adapters/providers/ implement it
 * (openai-compatible, local). Every provider streams; a non-streamed answer is assembled.
 */
export interface ProviderChatRequest {
  /** The model name the upstream knows (the catalog's provider route). */
  model: string;
  messages: Pick<ChatMessage, 'role' | 'content' | 'name'>[];
  maxTokens: number;
  options: ChatOptions;
}

export type ProviderEvent =
  | { type: 'delta'; content: string }
  | { type: 'finish'; reason: string }
  /** What the upstream says it used; either count may be missing. */
  | { type: 'usage'; promptTokens?: number | undefined; completionTokens?: number | undefined };

export interface ChatProvider {
  stream(request: ProviderChatRequest, signal: AbortSignal): AsyncIterable<ProviderEvent>;
}

/** An upstream failure: `timeout` when it did not answer in time, `failed` for anything else. */
export class ProviderError extends Error {
  readonly kind: 'failed' | 'timeout';
  readonly status: number | undefined;
  constructor(kind: 'failed' | 'timeout', message: string, status?: number) {
    super(message);
    this.name = 'ProviderError';
    this.kind = kind;
    this.status = status;
  }
}

export interface ProviderRegistry {
  get(name: string): ChatProvider | undefined;
}
