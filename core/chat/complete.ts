import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import { startAutoTopUpIfLow } from '../payments/auto-top-up.ts';
import { prepareChat, runChat } from './chat.ts';
import type { ChatRequest } from './schema.ts';
import { collectCompletion, streamChunks } from './views.ts';

/** POST /chat/completions: a chat.completion object, or its chunks when `stream` is true. */
export async function chatCompletion(deps: CoreDeps, em: EntityManager, principal: Principal, request: ChatRequest, signal: AbortSignal) {
  const chat = await prepareChat(deps, em, principal, request);
  const events = thenAutoTopUp(deps, principal.accountId, runChat(deps, chat, { signal, streaming: request.stream }));
  if (request.stream) return { stream: true as const, chunks: streamChunks(chat, events) };
  return { stream: false as const, completion: await collectCompletion(chat, events) };
}

/**
 * The chat's events, then, once its hold has ended (settled, or released), a check of the
 * account's auto top-up, off the answer's path: it never delays or fails the answer.
 */
async function* thenAutoTopUp<T>(deps: CoreDeps, accountId: string, events: AsyncGenerator<T, void, undefined>): AsyncGenerator<T, void, undefined> {
  try {
    yield* events;
  } finally {
    void startAutoTopUpIfLow(deps, accountId);
  }
}
