import { countTokens as countO200k } from 'gpt-tokenizer/encoding/o200k_base';
import type { ChatMessage } from './schema.ts';

/**
 * Token counts with a real tokenizer (o200k_base, the encoding of current OpenAI models).
 * Special-token text in user content is counted as plain text, never interpreted.
 */
const PLAIN = { disallowedSpecial: new Set<string>() };

export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : countO200k(text, PLAIN);
}

/** OpenAI's accounting for chat input: 3 tokens per message, 1 per name, 3 to prime the reply. */
export function countChatTokens(messages: Pick<ChatMessage, 'role' | 'content' | 'name'>[]): number {
  let total = 3;
  for (const m of messages) {
    total += 3 + countTextTokens(m.role) + countTextTokens(m.content);
    if (m.name) total += 1 + countTextTokens(m.name);
  }
  return total;
}
