import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { notFound } from '../errors.ts';
import { COMPLETION_KINDS, type CompletionKind } from './recorder.ts';
import { chatUsageSchema, usageView } from './views.ts';

/**
 * Reading a completion's record back (GET /chat/completions/{id}, GET /responses/{id}): its
 * usage, cost and duration, to its owner only. The records are written by recorder.ts.
 */
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
