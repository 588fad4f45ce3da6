import { describe, expect, it } from 'vitest';
import { runChat, type ChatRun } from '../../core/chat/chat.ts';
import type { ChatProvider } from '../../core/ports.ts';
import { notFound } from '../../core/errors.ts';
import { createRouteBreakers } from '../../adapters/providers/breakers.ts';

const baseChat = {
  id: 'chatcmpl-x',
  created: 0,
  model: { id: 'm', context_window: 4096, max_output_tokens: 1000 },
  prices: { inputPerMillion: 1_000_000n, outputPerMillion: 1_000_000n },
  inputTokens: 3,
  maxTokens: 10,
  holdId: 'hold_x',
  holdAmount: 13n,
  request: { messages: [], options: {} },
};

describe('a chat whose reservation is gone when it ends', () => {
  it('fails as 503 database_unreachable (a database crash lost the asynchronously committed hold), not as 404', async () => {
    const provider: ChatProvider = {
      async *stream() {
        yield { type: 'delta', content: 'Hi' };
        yield { type: 'finish', reason: 'stop' };
      },
    };
    const holds = {
      settle: () => Promise.reject(notFound('hold_not_found', 'No hold hold_x.')),
      release: () => Promise.reject(notFound('hold_not_found', 'No hold hold_x.')),
    };
    const chat: ChatRun = { ...baseChat, routes: [{ key: 'p/m', provider: 'p', model: 'm', chat: provider }] };
    const events = runChat({ holds, routeBreakers: createRouteBreakers({ failures: 5, windowMs: 60_000, coolDownMs: 30_000 }) }, chat, { signal: new AbortController().signal, streaming: false });
    const seen: unknown[] = [];
    const err = await (async () => {
      for await (const e of events) seen.push(e);
    })().catch((e: unknown) => e);
    expect(seen).toEqual([{ type: 'delta', content: 'Hi' }]);
    expect(err).toMatchObject({ code: 'unavailable', reason: 'database_unreachable' });
  });

  it('fails the same way when the hold is gone at the release after an upstream failure', async () => {
    const provider: ChatProvider = {
      // eslint-disable-next-line require-yield
      async *stream() {
        throw new Error('connection reset');
      },
    };
    const holds = {
      settle: () => Promise.reject(new Error('a failed upstream with nothing delivered is released, not settled')),
      release: () => Promise.reject(notFound('hold_not_found', 'No hold hold_x.')),
    };
    const chat: ChatRun = { ...baseChat, routes: [{ key: 'p/m', provider: 'p', model: 'm', chat: provider }] };
    const err = await (async () => {
      for await (const _ of runChat({ holds, routeBreakers: createRouteBreakers({ failures: 5, windowMs: 60_000, coolDownMs: 30_000 }) }, chat, { signal: new AbortController().signal, streaming: false })) void _;
    })().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'unavailable', reason: 'database_unreachable' });
  });
});
