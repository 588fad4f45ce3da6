import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import { startAutoTopUpIfLow } from '../payments/auto-top-up.ts';
import { prepareChat } from './chat.ts';
import { runRecorded } from './record-run.ts';
import type { CompletionKind } from './recorder.ts';
import type { ChatRequest } from './schema.ts';
import { collectCompletion, streamChunks } from './views.ts';

/**
 * POST /chat/completions: a chat.completion object, or its chunks when `stream` is true. Every
 * caller (REST, streamed or not, and MCP's `chat`) comes through here, so every charged
 * completion is recorded for `GET /chat/completions/{id}` (core/chat/record-run.ts).
 */
export async function chatCompletion(
  deps: CoreDeps,
  em: EntityManager,
  principal: Principal,
  request: ChatRequest,
  signal: AbortSignal,
  /** How the completion is recorded: as a chat completion, or as a response of the Responses API (its own id). */
  record: { kind: CompletionKind; id?: (chatId: string) => string } = { kind: 'chat.completion' },
) {
  const startedAt = performance.now();
  const chat = await prepareChat(deps, em, principal, request);
  const recorded = runRecorded(deps, principal, chat, { signal, streaming: request.stream, kind: record.kind, recordId: record.id?.(chat.id), startedAt });
  const events = thenAutoTopUp(deps, principal.accountId, recorded);
  if (request.stream) return { stream: true as const, chunks: streamChunks(chat, events) };
  return { stream: false as const, completion: await collectCompletion(chat, events) };
}

/**
 * The chat's events, then, once its charge is written (settled, or released), a check of the
 * account's auto top-up, off the answer's path: it never delays or fails the answer.
 */
async function* thenAutoTopUp<T>(deps: CoreDeps, accountId: string, events: AsyncGenerator<T, void, undefined>): AsyncGenerator<T, void, undefined> {
  try {
    yield* events;
  } finally {
    void deps.charges.settledFor(accountId, { send: false }).then(() => startAutoTopUpIfLow(deps, accountId));
  }
}
