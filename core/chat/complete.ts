import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import type { HoldOutcome } from '../money/holds.ts';
import { prepareChat, runChat, type ChatEvent, type PreparedChat } from './chat.ts';
import type { ChatRequest } from './schema.ts';
import { countTextTokens } from './tokens.ts';
import { collectCompletion, streamChunks } from './views.ts';

/** POST /chat/completions: a chat.completion object, or its chunks when `stream` is true. */
export async function chatCompletion(deps: CoreDeps, em: EntityManager, principal: Principal, request: ChatRequest, signal: AbortSignal) {
  const started = performance.now();
  const chat = await prepareChat(deps, em, principal, request);
  // The charge as the hold batcher reports it, for the record of a run that ends without `done`.
  let settled: HoldOutcome | undefined;
  const holds = {
    settle: async (holdId: string, actual: bigint) => (settled = await deps.holds.settle(holdId, actual)),
    release: (holdId: string) => deps.holds.release(holdId),
  };
  const events = recorded(deps, principal, chat, started, () => settled, runChat({ holds }, chat, { signal, streaming: request.stream }));
  if (request.stream) return { stream: true as const, chunks: streamChunks(chat, events) };
  return { stream: false as const, completion: await collectCompletion(chat, events) };
}

/**
 * Passes a run's events on, and records what it was charged (core/chat/records.ts) before the
 * client sees its usage, so that a read right after the answer finds it. A run that ends
 * without `done` but was charged (the client went away, or the upstream failed after output
 * began) is recorded too, with no finish reason. The record never changes the charge.
 */
async function* recorded(
  deps: Pick<CoreDeps, 'completions'>,
  principal: Principal,
  chat: PreparedChat,
  started: number,
  settled: () => HoldOutcome | undefined,
  events: AsyncGenerator<ChatEvent, void, undefined>,
): AsyncGenerator<ChatEvent, void, undefined> {
  const base = { id: chat.id, kind: 'chat.completion' as const, accountId: principal.accountId, keyId: principal.keyId, model: chat.model.id, createdAt: new Date(chat.created * 1000) };
  let produced = '';
  let done = false;
  try {
    for await (const event of events) {
      if (event.type === 'delta') produced += event.content;
      else {
        done = true;
        const { promptTokens, completionTokens, cost } = event.usage;
        await deps.completions.record({ ...base, promptTokens, completionTokens, cost, finishReason: event.finishReason, durationMs: performance.now() - started });
      }
      yield event;
    }
  } finally {
    const charge = settled();
    if (!done && charge?.status === 'settled') {
      // runChat charges such a run on its own count: the input as counted, the output produced (at most the limit).
      const completionTokens = Math.min(countTextTokens(produced), chat.maxTokens);
      await deps.completions.record({ ...base, promptTokens: chat.inputTokens, completionTokens, cost: charge.captured, finishReason: null, durationMs: performance.now() - started });
    }
  }
}
