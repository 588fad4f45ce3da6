import type { Micro } from '../money/coins.ts';

/**
 * What a finished completion was charged, for its owner to read back later (docs/chat.md, "The
 * cost afterwards"): the fallback for clients that drop `usage.cost_coins` from the answer.
 * Generic over the API format (`kind`): chat completions' records and the Responses API's, each
 * read by its own route with the same function (records.ts).
 */
export const COMPLETION_KINDS = {
  'chat.completion': { object: 'chat.completion.record', noun: 'chat completion' },
  response: { object: 'response.record', noun: 'response' },
} as const;
export type CompletionKind = keyof typeof COMPLETION_KINDS;

/** A record as the chat knows it when it ends; its cost is what the charge captured (charge-writer.ts writes both together). */
export interface CompletionRecord {
  id: string;
  kind: CompletionKind;
  accountId: string;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** null: the request ended before the model finished (the client went away, or the upstream failed mid-stream). */
  finishReason: string | null;
  /** When the request came in: the `created` of its answer. */
  createdAt: Date;
  durationMs: number;
  /** The route that served (null: none was called), and what it cost upstream (null: unknown). For the operator, never the customer. */
  provider: string | null;
  routeModel: string | null;
  upstreamCost: Micro | null;
}
