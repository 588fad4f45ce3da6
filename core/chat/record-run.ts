import type { CoreDeps } from '../context.ts';
import type { SpendingPrincipal as Principal } from '../auth/principals.ts';
import type { HoldOutcome } from '../money/holds.ts';
import { runChat, type ChatEvent, type PreparedChat, type ServedRoute } from './chat.ts';
import type { CompletionKind } from './recorder.ts';
import { countOutputTokens } from './tokens.ts';

/**
 * Runs a prepared chat (runChat, unchanged) and records what it was charged
 * (core/chat/records.ts), for any API format that consumes runChat's events: the chat format
 * (`kind` 'chat.completion') and the Responses API's ('response', under the response's own id).
 *
 * The record of a run that ends with `done` is written before `done` is passed on, so that the
 * client, once it has its usage, finds the record. A run that ends without `done` but was
 * charged (the client went away, or the upstream failed after output began) is recorded too,
 * with no finish reason, from the settle runChat made. The record never changes the charge.
 */
export async function* runRecorded(
  deps: Pick<CoreDeps, 'holds' | 'completions' | 'routeBreakers' | 'logger'>,
  principal: Principal,
  chat: PreparedChat,
  opts: { signal: AbortSignal; streaming: boolean; kind: CompletionKind; startedAt: number; /** The record's id when it is not the chat's (a response's `resp_…`). */ recordId?: string | undefined },
): AsyncGenerator<ChatEvent, void, undefined> {
  // The charge as the hold batcher reports it, for a run that ends without `done`.
  let settled: HoldOutcome | undefined;
  const holds = {
    settle: async (holdId: string, actual: bigint) => (settled = await deps.holds.settle(holdId, actual)),
    release: (holdId: string) => deps.holds.release(holdId),
  };
  // The route that served, set at the charge: for the operator only, never shown to the customer.
  let served: ServedRoute | undefined;
  const route = () => ({ provider: served?.provider ?? null, routeModel: served?.model ?? null, upstreamCost: served?.upstreamCost ?? null });
  const base = { id: opts.recordId ?? chat.id, kind: opts.kind, accountId: principal.accountId, keyId: principal.keyId, model: chat.model.id, createdAt: new Date(chat.created * 1000) };
  const durationMs = () => performance.now() - opts.startedAt;
  let produced = '';
  const calls: { name: string; arguments: string }[] = [];
  let done = false;
  try {
    for await (const event of runChat({ holds, routeBreakers: deps.routeBreakers, warn: (fields, message) => deps.logger.warn(fields, message) }, chat, { signal: opts.signal, streaming: opts.streaming, onCharged: (r) => (served = r) })) {
      if (event.type === 'delta') produced += event.content;
      else if (event.type === 'tool_call_start') calls.push({ name: event.name, arguments: '' });
      else if (event.type === 'tool_call_arguments') calls[event.index]!.arguments += event.arguments;
      else {
        done = true;
        const { promptTokens, completionTokens, cost } = event.usage;
        await deps.completions.record({ ...base, ...route(), promptTokens, completionTokens, cost, finishReason: event.finishReason, durationMs: durationMs() });
      }
      yield event;
    }
  } finally {
    if (!done && settled?.status === 'settled') {
      // runChat charges such a run on its own count: the input as counted, the output produced (at most the limit).
      const completionTokens = Math.min(countOutputTokens(produced, calls), chat.maxTokens);
      await deps.completions.record({ ...base, ...route(), promptTokens: chat.inputTokens, completionTokens, cost: settled.captured, finishReason: null, durationMs: durationMs() });
    }
  }
}
