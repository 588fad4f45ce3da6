import { createHash } from 'node:crypto';
import { o200k } from '../../core/chat/tokenizer.ts';
import type { ChatProvider, ProviderChatRequest, ProviderEvent } from '../../core/ports.ts';

/**
 * The built-in offline provider behind the demo models. Deterministic: the same messages give
 * the same answer. The answer echoes the last user message, then continues with words drawn
 * from a seeded generator, and stops at the output limit (finish_reason "length") or at a
 * length chosen by the seed ("stop"). The completion's usage is counted with the same tokenizer
 * as billing, on exactly the text returned; the prompt's is left to core's count.
 *
 * Upstream model names: `echo` answers at once; `echo-slow` waits 50 ms between chunks (for
 * tests and demos of streaming).
 */
const WORDS = (
  'the model access service answers every request with care and counts each token it spends ' +
  'coins move from wallet to ledger in one transaction so nothing is lost and nothing is paid twice ' +
  'streams arrive chunk by chunk while the reservation waits for its settlement'
).split(' ');

export function localProvider(): ChatProvider {
  return {
    async *stream(request: ProviderChatRequest, signal: AbortSignal): AsyncGenerator<ProviderEvent> {
      const delayMs = request.model === 'echo-slow' ? 50 : 0;
      const { text, finishReason } = answer(request);
      const tokens = o200k().encode(text, { disallowedSpecial: new Set() });
      // Stream a few tokens per chunk, as real upstreams do.
      for (let i = 0; i < tokens.length; i += 4) {
        if (signal.aborted) throw signal.reason ?? new Error('aborted');
        if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
        yield { type: 'delta', content: o200k().decode(tokens.slice(i, i + 4)) };
      }
      yield { type: 'finish', reason: finishReason };
      // The prompt is not counted again here: core's own count (bounded in time) is billed.
      yield { type: 'usage', completionTokens: tokens.length };
    },
  };
}

function answer(request: ProviderChatRequest): { text: string; finishReason: 'stop' | 'length' } {
  const lastUser = [...request.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
  const seed = createHash('sha256').update(JSON.stringify(request.messages)).digest();
  const wanted = 12 + (seed[0]! % 40);
  const words = [`You said: "${lastUser.slice(0, 200)}".`];
  for (let i = 0; i < wanted; i++) words.push(WORDS[seed[(i % 31) + 1]! % WORDS.length]!);
  const full = `${words.join(' ')}.`;
  const tokens = o200k().encode(full, { disallowedSpecial: new Set() });
  if (tokens.length <= request.maxTokens) return { text: full, finishReason: 'stop' };
  return { text: o200k().decode(tokens.slice(0, request.maxTokens)), finishReason: 'length' };
}
