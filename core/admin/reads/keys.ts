import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { walletOwnerId } from './accounts.ts';
import { checkCursor, Conditions, idsInput, iso, pageInput, pageOf, prefixedId, textArray, timeRangeInput } from './paging.ts';

export const keyId = prefixedId('key');

export const keyListInput = pageInput.merge(timeRangeInput).extend({
  /** The wallet the keys spend from: a person's account, or an organization (`org_…`). */
  account: walletOwnerId.optional(),
  /** `standard`: made by the account or an operator; `app`: the key of a connected app; `management`: manages keys and organizations. */
  kind: z.enum(['standard', 'app', 'management']).optional(),
  revoked: z.boolean().optional(),
  after: keyId.optional(),
});

export const keyIdsInput = idsInput(keyId);

interface Row {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  kind: 'standard' | 'app' | 'management';
  member_id: string | null;
  disabled_at: Date | string | null;
  created_at: Date | string;
  last_used_at: Date | string | null;
  revoked_at: Date | string | null;
}

/** Named columns only: the key's hash never leaves the table. */
const SELECT = 'select k.id, k.account_id, k.name, k.prefix, k.kind, k.member_id, k.disabled_at, k.created_at, k.last_used_at, k.revoked_at from api_keys k';

const view = (r: Row) => ({
  id: r.id,
  object: 'api_key' as const,
  account: r.account_id,
  name: r.name,
  prefix: r.prefix,
  kind: r.kind,
  /** The organization whose wallet the key spends from; null: a personal key. */
  organization_id: r.member_id ? r.account_id : null,
  /** The person the key belongs to. */
  user_id: r.member_id ?? r.account_id,
  disabled_at: iso(r.disabled_at),
  created_at: iso(r.created_at)!,
  last_used_at: iso(r.last_used_at),
  revoked_at: iso(r.revoked_at),
});
export type AdminKeyView = ReturnType<typeof view>;

/** API keys of every account (or one), newest first. */
export async function listApiKeys(em: EntityManager, input: z.output<typeof keyListInput>) {
  const where = new Conditions().range('k.created_at', input).after('k', 'api_keys', input.after);
  where.addIf(input.account, 'k.account_id = ?').addIf(input.kind, 'k.kind = ?');
  if (input.revoked !== undefined) where.add(input.revoked ? 'k.revoked_at is not null' : 'k.revoked_at is null');
  const rows = await em.execute<Row[]>(`${SELECT} ${where.sql()} order by k.created_at desc, k.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'api_keys', input.after, rows);
  return pageOf(rows.map(view), input.first);
}

/** The keys with these ids, in one query; unknown ids are left out. */
export async function apiKeysByIds(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<Row[]>(`${SELECT} where k.id = any(?::text[])`, [textArray(ids)]);
  return { object: 'list' as const, data: rows.map(view) };
}
