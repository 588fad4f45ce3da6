import { textCost } from '../catalog/pricing.ts';
import { routeOrder } from '../catalog/routes.ts';
import { routeKey, type TextModel, type TextRoute } from '../catalog/schema.ts';
import { CoreError } from '../errors.ts';
import type { Micro } from '../money/coins.ts';
import { ProviderError, type ChatProvider, type ProviderRegistry } from '../ports.ts';

/**
 * The routes of a chat (docs/providers.md, "Routes, fallback and breakers"): each of the
 * model's routes whose provider this server has, in the order the request tries them.
 */
export interface ChatRoute {
  /** `provider/model`: the route's breaker and metrics name. */
  key: string;
  provider: string;
  model: string;
  chat: ChatProvider;
  /** The upstream's price in coins per million tokens, when the catalog says. */
  cost?: TextRoute['cost'];
}

/** The routes to try, in order; a route whose provider is not configured here is left out, and a model with none is unavailable. */
export function chatRoutes(model: TextModel, providers: ProviderRegistry, random?: () => number): ChatRoute[] {
  const routes: ChatRoute[] = [];
  for (const r of routeOrder(model, random)) {
    const chat = providers.get(r.provider);
    if (chat) routes.push({ key: routeKey(r), provider: r.provider, model: r.model, chat, cost: r.cost });
  }
  if (routes.length === 0) throw new CoreError('unavailable', `The provider of '${model.id}' is not configured on this server.`, { reason: 'provider_unavailable' });
  return routes;
}

/** What a route's upstream reported it used and cost, each when it did. */
export interface UpstreamUsage {
  promptTokens?: number | undefined;
  completionTokens?: number | undefined;
  costUsd?: number | undefined;
}

/**
 * The upstream's counts that are possible for one answer of this model: whole numbers from 0 to
 * its context window plus its output limit. Any other (negative, fractional, 1e300, …) is
 * dropped, so that our own count stands in for it, and named in `impossible` for the
 * operator's log: a broken count never becomes a free answer, a failed charge or a lost record.
 */
export function checkedUsage(reported: UpstreamUsage, model: { context_window: number; max_output_tokens: number }): { usage: UpstreamUsage; impossible: Record<string, unknown> | undefined } {
  const most = model.context_window + model.max_output_tokens;
  const possible = (n: number | undefined) => n === undefined || (Number.isSafeInteger(n) && n >= 0 && n <= most);
  const prompt = possible(reported.promptTokens);
  const completion = possible(reported.completionTokens);
  if (prompt && completion) return { usage: reported, impossible: undefined };
  return {
    usage: { ...reported, promptTokens: prompt ? reported.promptTokens : undefined, completionTokens: completion ? reported.completionTokens : undefined },
    impossible: { ...(!prompt && { prompt_tokens: reported.promptTokens }), ...(!completion && { completion_tokens: reported.completionTokens }) },
  };
}

/** 1 USD = 1000 coins = 10^9 micro-coins. */
const MICRO_PER_USD = 1_000_000_000;

/**
 * What the request cost the operator upstream: the upstream's own figure where it reported one,
 * else the route's catalog price on the upstream's token counts (ours where it reported none),
 * rounded up to a micro-coin; null when neither says.
 */
export function upstreamCost(route: Pick<ChatRoute, 'cost'>, reported: UpstreamUsage, counted: { promptTokens: number; completionTokens: number }): Micro | null {
  // An upstream's figure is taken only when it is a sane amount (a finite, non-negative number
  // of micro-coins a bigint can hold exactly); anything else falls back to the catalog's price.
  const micro = reported.costUsd === undefined ? NaN : Math.round(reported.costUsd * MICRO_PER_USD);
  if (Number.isSafeInteger(micro) && micro >= 0) return BigInt(micro);
  if (!route.cost) return null;
  const prices = { inputPerMillion: route.cost.input_per_million, outputPerMillion: route.cost.output_per_million };
  return textCost(prices, reported.promptTokens ?? counted.promptTokens, reported.completionTokens ?? counted.completionTokens);
}

/** The breaker's and the metrics' name for how a route failed. */
export function failureReason(err: unknown): string {
  if (!(err instanceof ProviderError)) return 'error';
  if (err.kind === 'timeout') return 'timeout';
  return err.status === undefined ? 'unreachable' : `http_${err.status}`;
}

/**
 * The customer's error when a route refused the request on its merits: a 400 in our words,
 * with the refusal's reason (content_policy, invalid_input) and no word of the upstream's.
 */
export function refusal(err: ProviderError, modelId: string): CoreError {
  if (err.code === 'content_policy') {
    return new CoreError('invalid_request', `The model '${modelId}' refused the request under its content policy. Nothing was charged.`, { param: 'messages', reason: 'content_policy_violation' });
  }
  return new CoreError('invalid_request', `The model '${modelId}' refused the request as invalid input. Nothing was charged.`, { param: 'messages', reason: 'upstream_refused' });
}
