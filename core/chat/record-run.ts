import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import type { Micro } from '../money/coins.ts';
import { runChat, type ChargeNote, type ChatEvent, type PreparedChat, type ServedRoute } from './chat.ts';
import type { CompletionKind } from './recorder.ts';

/**
 * Runs a prepared chat (runChat, unchanged) and hands its hold's end to the charge writer
 * (core/chat/charge-writer.ts) with the record of what it was charged (core/chat/records.ts),
 * for any API format that consumes runChat's events: the chat format (`kind` 'chat.completion')
 * and the Responses API's ('response', under the response's own id). The charge and the record
 * are written together, behind the answer; a read through this instance waits for them.
 */
export async function* runRecorded(
  deps: Pick<CoreDeps, 'charges' | 'routeBreakers' | 'logger'>,
  principal: Principal,
  chat: PreparedChat,
  opts: { signal: AbortSignal; streaming: boolean; kind: CompletionKind; startedAt: number; /** The record's id when it is not the chat's (a response's `resp_…`). */ recordId?: string | undefined },
): AsyncGenerator<ChatEvent, void, undefined> {
  // The route that served, set at the charge: for the operator only, never shown to the customer.
  let served: ServedRoute | undefined;
  const accountId = principal.accountId;
  const holds = {
    settle: (holdId: string, cost: Micro, note: ChargeNote) =>
      deps.charges.settle({
        holdId,
        accountId,
        cost,
        record: {
          id: opts.recordId ?? chat.id,
          kind: opts.kind,
          accountId,
          keyId: principal.keyId,
          model: chat.model.id,
          createdAt: new Date(chat.created * 1000),
          promptTokens: note.promptTokens,
          completionTokens: note.completionTokens,
          finishReason: note.finishReason,
          durationMs: performance.now() - opts.startedAt,
          provider: served?.provider ?? null,
          routeModel: served?.model ?? null,
          upstreamCost: served?.upstreamCost ?? null,
        },
      }),
    release: (holdId: string) => deps.charges.release({ holdId, accountId }),
  };
  yield* runChat({ holds, routeBreakers: deps.routeBreakers, warn: (fields, message) => deps.logger.warn(fields, message) }, chat, {
    signal: opts.signal,
    streaming: opts.streaming,
    onCharged: (r) => (served = r),
  });
}
