import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import { prepareChat, runChat } from './chat.ts';
import type { ChatRequest } from './schema.ts';
import { collectCompletion, streamChunks } from './views.ts';

/** POST /chat/completions: a chat.completion object, or its chunks when `stream` is true. */
export async function chatCompletion(deps: CoreDeps, em: EntityManager, principal: Principal, request: ChatRequest, signal: AbortSignal) {
  const chat = await prepareChat(deps, em, principal, request);
  const events = runChat(deps, chat, { signal, streaming: request.stream });
  if (request.stream) return { stream: true as const, chunks: streamChunks(chat, events) };
  return { stream: false as const, completion: await collectCompletion(chat, events) };
}
