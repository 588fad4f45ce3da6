import type { EntityManager } from '@mikro-orm/postgresql';
import { requireSupportedParameters, requireTextModel } from '../catalog/catalog.ts';
import { textCost, textPrices, type TextPrices } from '../catalog/pricing.ts';
import type { TextModel } from '../catalog/schema.ts';
import type { CoreDeps } from '../context.ts';
import { CoreError, invalid } from '../errors.ts';
import type { BatchedReserve } from '../money/hold-batcher.ts';
import { randomBase62 } from '../ids.ts';
import { requireModelAllowed, type SpendingPrincipal as Principal } from '../auth/principals.ts';
import { formatCoins, type Micro } from '../money/coins.ts';
import { ProviderError, type RouteBreakers, type RoutePass, type ToolCall } from '../ports.ts';
import { chatRoutes, checkedUsage, failureReason, refusal, upstreamCost, type ChatRoute, type UpstreamUsage } from './routes.ts';
import { contextTooLong, type ChatRequest } from './schema.ts';
import { compileRequestSchemas } from './request-schemas.ts';
import { countChatTokensAsync, countOutputTokens, minChatTokens } from './tokens.ts';

/**
 * A chat completion, paid as SPEC part 1 rule 1 says: reserve the input plus the output
 * limit at the model's prices, call the provider, then settle on the usage it reports
 * (clamped to the limit; our own count when it reports none) and release the rest.
 */
export interface PreparedChat {
  id: string;
  created: number;
  model: TextModel;
  /** The model's routes this server can call, in the order this request tries them (core/chat/routes.ts). */
  routes: ChatRoute[];
  /** The prices the hold was made at: a later price edit does not change this request. */
  prices: TextPrices;
  inputTokens: number;
  maxTokens: number;
  holdId: string;
  holdAmount: Micro;
  request: ChatRequest;
}

export async function prepareChat(deps: Pick<CoreDeps, 'catalog' | 'providers' | 'config' | 'holds' | 'charges' | 'clock'>, em: EntityManager, principal: Principal, request: ChatRequest): Promise<PreparedChat> {
  // The price in force at the request's time: a scheduled change applies to requests from its date on.
  const model = await deps.catalog.get(em, request.model, { at: deps.clock() });
  requireModelAllowed(principal, model.id);
  requireTextModel(model);
  if (model.paid_only && !principal.paid) {
    throw new CoreError('paid_account_required', `The model '${model.id}' needs a paid account: make a first top-up or subscribe.`);
  }
  // Before anything is counted or reserved: what the model supports, then the request's schemas.
  requireSupportedParameters(model, request.usedParameters, { maxTokensParam: request.maxTokensParam });
  const routes = chatRoutes(model, deps.providers);

  const maxTokens = request.maxTokens ?? model.default_max_tokens;
  if (maxTokens > model.max_output_tokens) {
    throw invalid(request.maxTokensParam, `Invalid value for '${request.maxTokensParam}': at most ${model.max_output_tokens} for '${model.id}'.`);
  }
  // The input may use what the output limit leaves of the context window. A request far over
  // it is refused before any tokenizing: minChatTokens is a lower bound of the count (no o200k
  // token is longer than 128 bytes, so no text has fewer tokens than characters / 128), which
  // never refuses input that fits and refuses e.g. 4 MB of text for a 16k-token model at once.
  // Otherwise the count runs in pieces, yielding to the event loop, and stops as soon as it is
  // over the limit: at most about the context window's worth of tokens is ever counted.
  const inputLimit = model.context_window - maxTokens;
  const lowerBound = minChatTokens(request.messages);
  if (lowerBound > inputLimit) throw contextTooLong(lowerBound, maxTokens, model.context_window, true);
  await compileRequestSchemas(request);
  const inputTokens = await countChatTokensAsync(request.messages, { stopAbove: inputLimit, tools: request.tools, responseFormat: request.responseFormat });
  if (inputTokens > inputLimit) throw contextTooLong(inputTokens, maxTokens, model.context_window, true);

  const prices = textPrices(model, deps.config.apiPricePercent);
  const holdAmount = textCost(prices, inputTokens, maxTokens);
  const id = `chatcmpl-${randomBase62(24)}`;
  // The key id makes the reservation refuse a key revoked since it was looked up (chatProcedure).
  const { holdId } = await reserveAfterCharges(deps, principal.accountId, {
    accountId: principal.accountId,
    activeKeyId: principal.keyId,
    amount: holdAmount,
    reference: id,
    expiresAt: new Date(deps.clock().getTime() + deps.config.holdTtlSeconds * 1000),
    metadata: {
      kind: 'chat',
      model: model.id,
      key_id: principal.keyId,
      // An app's reservation counts against its spend cap (mas_reserve_many) and names it in the ledger.
      ...(principal.kind === 'app_connection' ? { app_connection_id: principal.connectionId } : {}),
      input_tokens: inputTokens,
      max_tokens: maxTokens,
      prices: { input_per_million: formatCoins(prices.inputPerMillion), output_per_million: formatCoins(prices.outputPerMillion) },
    },
  });
  return { id, created: Math.floor(deps.clock().getTime() / 1000), model, routes, prices, inputTokens, maxTokens, holdId, holdAmount, request };
}

/** What refuses a reservation for want of room: the balance, an app's spend cap, a key's spend limit. */
const NO_ROOM = new Set(['insufficient_balance', 'spend_cap_reached']);

/**
 * Reserves; refused for want of room while charges of this account are still being written
 * on this instance (core/chat/charge-writer.ts: the holds of its earlier chats still count in
 * full), it waits for them and tries once more, so that chats one after another are refused
 * exactly when they would be had each charge been written before the next chat.
 */
async function reserveAfterCharges(deps: Pick<CoreDeps, 'holds' | 'charges'>, accountId: string, input: BatchedReserve): Promise<{ holdId: string }> {
  try {
    return await deps.holds.reserve(input);
  } catch (err) {
    if (!(err instanceof CoreError && NO_ROOM.has(err.code) && deps.charges.hasPending(accountId))) throw err;
    await deps.charges.settledFor(accountId);
    return deps.holds.reserve(input);
  }
}

export interface ChatUsage {
  promptTokens: number;
  completionTokens: number;
  cost: Micro;
}

/** What a charge was for: the usage billed and, when the model finished, why (null: it did not). */
export interface ChargeNote {
  promptTokens: number;
  completionTokens: number;
  finishReason: string | null;
}

export type ChatEvent =
  | { type: 'delta'; content: string }
  /** A tool call begins: its index among this answer's calls (0, 1, …), its id and name. */
  | { type: 'tool_call_start'; index: number; id: string; name: string }
  /** A piece of the arguments of the call at `index` (never empty). */
  | { type: 'tool_call_arguments'; index: number; arguments: string }
  | { type: 'done'; finishReason: string; usage: ChatUsage };

/** The route that answered a charged run, and what the answer cost upstream (null: neither the upstream nor the catalog says). */
export interface ServedRoute {
  provider: string;
  model: string;
  upstreamCost: Micro | null;
}

/** What running a prepared chat reads of it. */
export type ChatRun = Pick<PreparedChat, 'routes' | 'prices' | 'inputTokens' | 'maxTokens' | 'holdId'> & {
  /** The model's limits bound the usage an upstream may report (checkedUsage). */
  model: Pick<TextModel, 'id' | 'context_window' | 'max_output_tokens'>;
  request: Pick<ChatRequest, 'messages' | 'options'> & Partial<Pick<ChatRequest, 'tools' | 'toolChoice' | 'parallelToolCalls' | 'responseFormat'>>;
};

/**
 * Calls the chat's routes in turn and yields the answer as it comes, then a final `done` with
 * the usage charged. A route whose breaker is open is skipped; a retryable failure of a route
 * before it produced any output moves on to the next route; a refusal on the request's merits
 * is the customer's 400 on every route, so it never moves on; once output began, there is no
 * other route. Each admitted call tells its breaker how it went, once. The price does not
 * depend on the route. Whatever happens the hold ends exactly once:
 * - the answer completes: charge the reported usage (clamped), release the rest;
 * - the client goes away (signal aborted, or the consumer stops iterating): charge what the
 *   upstream produced, never more than the hold;
 * - the upstream fails: charge nothing, or when streaming, only what was already delivered;
 * - every route failed or was skipped: charge nothing.
 * `onCharged` hears, at the charge, which route served (none: no route was called) and its upstream cost.
 */
export async function* runChat(
  deps: {
    /**
     * Ends the hold, once: not awaited, the answer does not wait for its charge to be written
     * (core/chat/charge-writer.ts). `note` is what the charge was for, for its record.
     */
    holds: { settle(holdId: string, cost: Micro, note: ChargeNote): unknown; release(holdId: string): unknown };
    routeBreakers: Pick<RouteBreakers, 'admit'>;
    /** The operator's warnings: an upstream that reported impossible usage. */
    warn?: ((fields: Record<string, unknown>, message: string) => void) | undefined;
  },
  chat: ChatRun,
  opts: { signal: AbortSignal; streaming: boolean; onCharged?: (route: ServedRoute | undefined) => void },
): AsyncGenerator<ChatEvent, void, undefined> {
  let produced = '';
  let delivered = '';
  // The tool calls, by the upstream's index: what it produced, and what reached the client.
  const producedCalls = new Map<number, ToolCall & { index: number }>();
  const deliveredCalls: ToolCall[] = [];
  let finishReason = 'stop';
  let reported: UpstreamUsage = {};
  let ended = false;
  // The route being called, and its breaker's pass until it is told how the call went.
  let serving: ChatRoute | undefined;
  let pass: { pass: RoutePass; startedAt: number } | undefined;
  const endPass = (failure?: { reason: string; retryAfterMs: number | undefined; fallback: boolean }) => {
    if (!pass) return;
    const latencyMs = performance.now() - pass.startedAt;
    pass.pass.done(failure ? { ok: false, latencyMs, ...failure } : { ok: true, latencyMs });
    pass = undefined;
  };

  const charge = (content: string, calls: readonly ToolCall[], useReported: boolean): ChatUsage => {
    ended = true;
    // An impossible count (negative, fractional, beyond the model) is replaced by our own.
    const checked = checkedUsage(reported, chat.model);
    if (checked.impossible) {
      deps.warn?.({ model: chat.model.id, route: serving?.key, reported: checked.impossible }, 'chat upstream reported impossible usage; our own count is charged instead');
    }
    const usage = checked.usage;
    // Reported usage is clamped to what was reserved (our input count, the output limit), so
    // the usage shown is exactly what is billed and the charge never exceeds the hold.
    const prompt = useReported && usage.promptTokens !== undefined ? usage.promptTokens : chat.inputTokens;
    const completion = useReported && usage.completionTokens !== undefined ? usage.completionTokens : countOutputTokens(content, calls);
    const promptTokens = clamp(prompt, chat.inputTokens);
    const completionTokens = clamp(completion, chat.maxTokens);
    const cost = textCost(chat.prices, promptTokens, completionTokens);
    opts.onCharged?.(serving && { provider: serving.provider, model: serving.model, upstreamCost: upstreamCost(serving, usage, { promptTokens: prompt, completionTokens: completion }) });
    deps.holds.settle(chat.holdId, cost, { promptTokens, completionTokens, finishReason: useReported ? finishReason : null });
    return { promptTokens, completionTokens, cost };
  };
  const producedSoFar = () => [...producedCalls.values()];

  try {
    const r = chat.request;
    const request = {
      messages: r.messages,
      maxTokens: chat.maxTokens,
      options: r.options,
      ...(r.tools && r.tools.length > 0 && { tools: r.tools }),
      ...(r.toolChoice !== undefined && { toolChoice: r.toolChoice }),
      ...(r.parallelToolCalls !== undefined && { parallelToolCalls: r.parallelToolCalls }),
      ...(r.responseFormat !== undefined && { responseFormat: r.responseFormat }),
    };
    let answered = false;
    let lastFailure: unknown;
    for (const [i, route] of chat.routes.entries()) {
      const admitted = await deps.routeBreakers.admit(route.key);
      if (!admitted) continue;
      serving = route;
      pass = { pass: admitted, startedAt: performance.now() };
      reported = {};
      finishReason = 'stop';
      try {
        for await (const event of route.chat.stream({ model: route.model, ...request }, opts.signal)) {
          if (event.type === 'delta') {
            if (event.content.length === 0) continue;
            produced += event.content;
            yield event;
            delivered += event.content;
          } else if (event.type === 'tool_call') {
            let call = producedCalls.get(event.index);
            if (!call) {
              // Calls are numbered 0, 1, … in the order they begin, whatever the upstream's indexes.
              call = { index: producedCalls.size, id: event.id || `call_${randomBase62(24)}`, name: event.name ?? '', arguments: '' };
              producedCalls.set(event.index, call);
              yield { type: 'tool_call_start', index: call.index, id: call.id, name: call.name };
              deliveredCalls.push({ id: call.id, name: call.name, arguments: '' });
            }
            if (event.arguments.length === 0) continue;
            call.arguments += event.arguments;
            yield { type: 'tool_call_arguments', index: call.index, arguments: event.arguments };
            deliveredCalls[call.index]!.arguments += event.arguments;
          } else if (event.type === 'finish') {
            finishReason = event.reason;
          } else {
            reported = { promptTokens: event.promptTokens, completionTokens: event.completionTokens, costUsd: event.costUsd };
          }
        }
      } catch (err) {
        if (opts.signal.aborted) {
          // The client went away: nothing to say about the route.
          endPass();
          charge(produced, producedSoFar(), false);
          return;
        }
        const routeFailed = !(err instanceof ProviderError) || err.retryable;
        const nothingOut = produced.length === 0 && producedCalls.size === 0;
        const moveOn = err instanceof ProviderError && routeFailed && nothingOut;
        if (routeFailed) endPass({ reason: failureReason(err), retryAfterMs: err instanceof ProviderError ? err.retryAfterMs : undefined, fallback: moveOn && i < chat.routes.length - 1 });
        else endPass();
        if (moveOn) {
          lastFailure = err;
          continue;
        }
        if (opts.streaming && (delivered.length > 0 || deliveredCalls.length > 0)) {
          charge(delivered, deliveredCalls, false);
        } else {
          ended = true;
          deps.holds.release(chat.holdId);
        }
        throw upstreamError(err, chat.model.id);
      }
      endPass();
      answered = true;
      break;
    }
    if (!answered) {
      ended = true;
      deps.holds.release(chat.holdId);
      throw lastFailure === undefined ? noRoute(chat.model.id) : upstreamError(lastFailure, chat.model.id);
    }
    if (opts.signal.aborted) {
      charge(produced, producedSoFar(), false);
      return;
    }
    const usage = charge(produced, producedSoFar(), true);
    yield { type: 'done', finishReason, usage };
  } finally {
    // The consumer stopped iterating (the client went away): charge what the upstream produced.
    endPass();
    if (!ended) charge(produced, producedSoFar(), false);
  }
}

function upstreamError(err: unknown, modelId: string): CoreError {
  if (err instanceof ProviderError) {
    if (err.kind === 'refused') return refusal(err, modelId);
    return err.kind === 'timeout'
      ? new CoreError('upstream_timeout', `The provider of '${modelId}' did not answer in time. Nothing was charged for the unanswered part.`)
      : new CoreError('upstream_failed', `The provider of '${modelId}' failed: ${err.message}`);
  }
  if (err instanceof CoreError) return err;
  return new CoreError('upstream_failed', `The provider of '${modelId}' failed.`);
}

/** Every route's breaker is open: none was called. */
function noRoute(modelId: string): CoreError {
  return new CoreError('upstream_failed', `Every provider of '${modelId}' has been failing and is paused for now. Nothing was charged; retry later.`, { reason: 'upstream_unavailable' });
}

function clamp(n: number, max: number): number {
  return Math.min(Math.max(0, Math.floor(n)), max);
}
