import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { checkCursor, Conditions, idsInput, iso, pageInput, pageOf, prefixedId, textArray, timeRangeInput } from './paging.ts';

export const accountId = prefixedId('acct');
/** An id whose wallet, ledger and keys may be read: a person's account (`acct_…`) or an organization (`org_…`, an account of kind organization). */
export const walletOwnerId = z.string().trim().regex(/^(acct|org)_[0-9A-Za-z]{1,64}$/, 'must be an id such as acct_… or org_…');

export const accountListInput = pageInput.merge(timeRangeInput).extend({
  /** Case-insensitive start of the email: served by the index accounts_email_pattern. */
  email_prefix: z.string().trim().min(1).max(254).optional(),
  /** Case-insensitive part of the email, anywhere: reads every account, for when the start is unknown. */
  email_contains: z.string().trim().min(1).max(254).optional(),
  paid: z.boolean().optional(),
  disabled: z.boolean().optional(),
  after: accountId.optional(),
});

export const accountIdsInput = idsInput(walletOwnerId);

export interface AdminAccountView {
  id: string;
  object: 'account';
  email: string;
  paid_account: boolean;
  created_at: string;
  /** Set while an operator has disabled the account: its keys, app tokens and sessions are refused. */
  disabled_at: string | null;
}

interface Row {
  id: string;
  email: string;
  paid: boolean;
  created_at: Date | string;
  disabled_at: Date | string | null;
}

const SELECT = 'select a.id, a.email, a.paid, a.created_at, a.disabled_at from accounts a';

const view = (r: Row): AdminAccountView => ({
  id: r.id,
  object: 'account',
  email: r.email,
  paid_account: r.paid,
  created_at: iso(r.created_at)!,
  disabled_at: iso(r.disabled_at),
});

/** `%` and `_` typed by the operator are letters, not wildcards. */
const likeText = (s: string) => s.toLowerCase().replace(/[\\%_]/g, '\\$&');

/** Accounts of people, newest first, filtered (organizations have their own list: organizations.ts). */
export async function listAccounts(em: EntityManager, input: z.output<typeof accountListInput>) {
  const where = new Conditions().add(`a.kind = 'person'`).range('a.created_at', input).after('a', 'accounts', input.after);
  if (input.email_prefix) where.add(`lower(a.email) like ? escape '\\'`, `${likeText(input.email_prefix)}%`);
  if (input.email_contains) where.add(`lower(a.email) like ? escape '\\'`, `%${likeText(input.email_contains)}%`);
  where.addIf(input.paid, 'a.paid = ?');
  if (input.disabled !== undefined) where.add(input.disabled ? 'a.disabled_at is not null' : 'a.disabled_at is null');
  const rows = await em.execute<Row[]>(`${SELECT} ${where.sql()} order by a.created_at desc, a.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'accounts', input.after, rows);
  return pageOf(rows.map(view), input.first);
}

/** The accounts with these ids (an organization's too: its billing e-mail), in one query (a dataloader's batch); unknown ids are left out. */
export async function accountsByIds(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<Row[]>(`${SELECT} where a.id = any(?::text[])`, [textArray(ids)]);
  return { object: 'list' as const, data: rows.map(view) };
}
