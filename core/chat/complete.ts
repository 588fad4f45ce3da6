import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import { prepareChat } from './chat.ts';
import { runRecorded } from './record-run.ts';
import type { ChatRequest } from './schema.ts';
import { collectCompletion, streamChunks } from './views.ts';

/**
 * POST /chat/completions: a chat.completion object, or its chunks when `stream` is true. Every
 * caller (REST, streamed or not, and MCP's `chat`) comes through here, so every charged
 * completion is recorded for `GET /chat/completions/{id}` (core/chat/record-run.ts).
 */
export async function chatCompletion(deps: CoreDeps, em: EntityManager, principal: Principal, request: ChatRequest, signal: AbortSignal) {
  const startedAt = performance.now();
  const chat = await prepareChat(deps, em, principal, request);
  const events = runRecorded(deps, principal, chat, { signal, streaming: request.stream, kind: 'chat.completion', startedAt });
  if (request.stream) return { stream: true as const, chunks: streamChunks(chat, events) };
  return { stream: false as const, completion: await collectCompletion(chat, events) };
}
