import type DataLoader from 'dataloader';
import type { Logger } from 'pino';
import { statementBatcher, type Execute } from '../db/batch.ts';
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

export interface CompletionRecord {
  id: string;
  kind: CompletionKind;
  accountId: string;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  cost: Micro;
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

const INSERT = `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms,
    provider, route_model, upstream_cost_micro)
  select id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms,
      provider, route_model, upstream_cost_micro
    from jsonb_to_recordset($1::jsonb) as r(id text, kind text, account_id text, key_id text, model text, prompt_tokens integer,
      completion_tokens integer, cost_micro bigint, finish_reason text, created_at timestamptz, duration_ms integer,
      provider text, route_model text, upstream_cost_micro bigint)
  on conflict (id) do nothing`;

/**
 * Writes the records of ended requests, batched as the hold batcher batches settles (one
 * statement in flight; the records that arrive meanwhile go together into the next), on the
 * hot path's statement pool. A write never fails its request nor changes its charge: the charge
 * is already settled, and a failed write is logged and forgotten (the ledger still has it).
 */
export class CompletionRecorder {
  private readonly inserts: DataLoader<CompletionRecord, true>;
  private readonly logger: Logger;

  constructor(execute: Execute, logger: Logger) {
    this.logger = logger;
    this.inserts = statementBatcher(async (items) => {
      const rows = items.map((r) => ({
        id: r.id,
        kind: r.kind,
        account_id: r.accountId,
        key_id: r.keyId,
        model: r.model,
        prompt_tokens: r.promptTokens,
        completion_tokens: r.completionTokens,
        cost_micro: r.cost.toString(),
        finish_reason: r.finishReason,
        created_at: r.createdAt.toISOString(),
        duration_ms: Math.max(0, Math.round(r.durationMs)),
        provider: r.provider,
        route_model: r.routeModel,
        upstream_cost_micro: r.upstreamCost === null ? null : r.upstreamCost.toString(),
      }));
      try {
        await execute(INSERT, [JSON.stringify(rows)]);
        return items.map(() => true as const);
      } catch (err) {
        if (rows.length === 1) throw err;
        // One row the database refuses must not lose the others: each again on its own.
        return Promise.all(rows.map((row) => execute(INSERT, [JSON.stringify([row])]).then(() => true as const, (e: unknown) => (e instanceof Error ? e : new Error(String(e))))));
      }
    });
  }

  async record(r: CompletionRecord): Promise<void> {
    try {
      await this.inserts.load(r);
    } catch (err) {
      this.logger.warn({ err, completion: r.id }, 'could not record the completion; its charge stands');
    }
  }
}
