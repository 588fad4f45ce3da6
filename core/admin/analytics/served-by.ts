import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { textArray } from '../reads/paging.ts';

/**
 * Which route served the request a ledger entry is about (its `reference`): the provider and
 * the model's name there, from the chat's completion record or the job's row (migration
 * routes). A Responses API record is kept under `resp_…` for the `chatcmpl-…` its charge is
 * referenced by. A reference that is no chat or job (a payment), or whose row names no route (written
 * before routes were recorded, or by a path that does not record them yet), has no answer.
 * One query for any number of references: the GraphQL admin batches a page's entries.
 */
export const routesServedInput = z.object({ references: z.array(z.string().min(1).max(200)).min(1).max(500) });

export const routesServedSchema = z
  .object({
    object: z.literal('list'),
    data: z.array(z.object({ reference: z.string(), provider: z.string(), model: z.string().nullable().describe("the model's name at the provider") }).strict()),
  })
  .strict();

const responseId = (reference: string) => reference.replace(/^chatcmpl-/, 'resp_');

export async function routesServed(em: EntityManager, references: string[]): Promise<z.infer<typeof routesServedSchema>> {
  const wanted = [...new Set(references)];
  const byResponse = new Map(wanted.filter((r) => r.startsWith('chatcmpl-')).map((r) => [responseId(r), r]));
  const rows = await em.execute<{ id: string; provider: string; route_model: string | null }[]>(
    `select id, provider, route_model from completion_records where id = any(?::text[]) and provider is not null
     union all
     select id, provider, route_model from generations where id = any(?::text[]) and provider is not null`,
    [textArray([...wanted, ...byResponse.keys()]), textArray(wanted)],
  );
  return {
    object: 'list',
    data: rows.map((r) => ({ reference: byResponse.get(r.id) ?? r.id, provider: r.provider, model: r.route_model })),
  };
}
