import type { EntityManager } from '@mikro-orm/postgresql';
import type DataLoader from 'dataloader';
import type { Logger } from 'pino';
import { z } from 'zod';
import { statementBatcher, type Execute } from '../db/batch.ts';
import { notFound } from '../errors.ts';
import type { Micro } from '../money/coins.ts';
import { chatUsageSchema, usageView } from './views.ts';

/**
 * What a finished completion was charged, for its owner to read back later (docs/chat.md, "The
 * cost afterwards"): the fallback for clients that drop `usage.cost_coins` from the answer.
 * Generic over the API format (`kind`): the chat format's records today, the Responses API's
 * later, each read by its own route with the same function.
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
}

const INSERT = `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms)
  select id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at, duration_ms
    from jsonb_to_recordset($1::jsonb) as r(id text, kind text, account_id text, key_id text, model text, prompt_tokens integer,
      completion_tokens integer, cost_micro bigint, finish_reason text, created_at timestamptz, duration_ms integer)
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

export const completionIdInput = z.object({ id: z.string().min(1).max(100) });

export const completionRecordSchema = z
  .object({
    id: z.string(),
    object: z.enum([COMPLETION_KINDS['chat.completion'].object, COMPLETION_KINDS.response.object]),
    created: z.number().int().describe('Unix seconds, as the answer\'s `created`'),
    model: z.string(),
    finish_reason: z.string().nullable().describe('as in the answer; null when the request ended before the model finished (the client went away, or the provider failed mid-stream)'),
    usage: chatUsageSchema,
    duration_ms: z.number().int().describe('from the start of the chat (after the key check and validation) to its charge'),
  })
  .strict();
export type CompletionRecordView = z.infer<typeof completionRecordSchema>;

interface RecordRow {
  id: string;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  cost_micro: string;
  finish_reason: string | null;
  created_at: Date;
  duration_ms: number;
}

/** The account's own record of kind `kind`; another account's is as unknown as a missing one (the same answer). */
export async function readCompletionRecord(em: EntityManager, accountId: string, kind: CompletionKind, id: string): Promise<CompletionRecordView> {
  const [row] = await em.execute<RecordRow[]>(
    `select id, model, prompt_tokens, completion_tokens, cost_micro::text, finish_reason, created_at, duration_ms
       from completion_records where id = ? and account_id = ? and kind = ?`,
    [id, accountId, kind],
  );
  const { object, noun } = COMPLETION_KINDS[kind];
  if (!row) throw notFound(`${kind === 'response' ? 'response' : 'completion'}_not_found`, `No ${noun} with this id belongs to this account.`);
  return {
    id: row.id,
    object,
    created: Math.floor(new Date(row.created_at).getTime() / 1000),
    model: row.model,
    finish_reason: row.finish_reason,
    usage: usageView({ promptTokens: row.prompt_tokens, completionTokens: row.completion_tokens, cost: BigInt(row.cost_micro) }),
    duration_ms: row.duration_ms,
  };
}
