import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { invalid } from '../errors.ts';
import { coinsToJson } from '../money/coins.ts';

/**
 * What an account spent, and on what (the account pages' Usage, `account.usage`): per day, per
 * model and per key, over a range of whole UTC days. Computed in SQL from the two records every
 * spend leaves: `completion_records` (chat and responses: model, key, tokens, cost) and
 * `generations` (media jobs: model, key, what the job was charged). A job counts on the day it
 * was submitted, with what it was charged (`cost_micro`): nothing while it runs, nothing when it
 * failed or was canceled (its hold came back). An operator's later refund of a job is a wallet
 * event, in the history, not here.
 */
export const MAX_USAGE_DAYS = 366;
export const DEFAULT_USAGE_DAYS = 30;

const DAY_MS = 86_400_000;
const date = z
  .string()
  .max(10)
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a date such as 2026-11-27');

export const usageInput = z.object({
  /** First day, inclusive (UTC); default: 29 days before `to`. */
  from: date.optional(),
  /** Last day, inclusive (UTC); default: today. */
  to: date.optional(),
});
export type UsageInput = z.input<typeof usageInput>;

/** A UTC day as a Date at its midnight; a day that does not exist (2026-02-30) is refused naming `param`. */
function parseDay(text: string, param: string): Date {
  const d = new Date(`${text}T00:00:00Z`);
  if (Number.isNaN(d.getTime()) || d.toISOString().slice(0, 10) !== text) throw invalid(param, `${param} is not a date that exists: ${text}.`);
  return d;
}

const dayOf = (d: Date) => d.toISOString().slice(0, 10);

/** The range asked for, checked: from ≤ to, at most MAX_USAGE_DAYS days. Shared by the usage read and the CSV filters. */
export function usageRange(input: { from?: string | undefined; to?: string | undefined }, now: Date, maxDays = MAX_USAGE_DAYS): { from: Date; to: Date; days: number } {
  const to = input.to ? parseDay(input.to, 'to') : new Date(`${dayOf(now)}T00:00:00Z`);
  const from = input.from ? parseDay(input.from, 'from') : new Date(to.getTime() - (DEFAULT_USAGE_DAYS - 1) * DAY_MS);
  if (from > to) throw invalid('from', `from (${dayOf(from)}) is after to (${dayOf(to)}).`);
  const days = Math.round((to.getTime() - from.getTime()) / DAY_MS) + 1;
  if (days > maxDays) throw invalid('from', `The range is ${days} days; at most ${maxDays} days can be shown at once.`);
  return { from, to, days };
}

const totalsSchema = z.object({
  requests: z.number().int(),
  spent_coins: z.number(),
  input_tokens: z.number().int(),
  output_tokens: z.number().int(),
});

export const usageSchema = z
  .object({
    object: z.literal('usage'),
    from: z.string().describe('first day, inclusive, YYYY-MM-DD (UTC)'),
    to: z.string().describe('last day, inclusive, YYYY-MM-DD (UTC)'),
    totals: totalsSchema.strict(),
    days: z.array(totalsSchema.extend({ day: z.string() }).strict()).describe('every day of the range, oldest first, zeros included'),
    models: z.array(totalsSchema.extend({ model: z.string(), kind: z.enum(['chat', 'media']) }).strict()).describe('most spent first'),
    keys: z.array(totalsSchema.extend({ key_id: z.string(), name: z.string(), prefix: z.string(), revoked: z.boolean() }).strict()).describe('most spent first'),
  })
  .strict();
export type UsageView = z.infer<typeof usageSchema>;

interface Row {
  grp: 'day' | 'model' | 'key';
  day: string | null;
  model: string | null;
  kind: 'chat' | 'media' | null;
  key_id: string | null;
  key_name: string | null;
  key_prefix: string | null;
  key_revoked: boolean | null;
  requests: number;
  spent: string;
  input_tokens: string;
  output_tokens: string;
}

/**
 * One statement: the account's chat records and jobs in the range, grouped three ways
 * (grouping sets), each group with its request count, spend and tokens. Both tables are read
 * through their (account_id, created_at) index.
 */
const USAGE = `
  with u as (
    select created_at, model, key_id, 'chat' as kind, cost_micro as spent, prompt_tokens::bigint as input_tokens, completion_tokens::bigint as output_tokens
      from completion_records where account_id = ? and created_at >= ? and created_at < ?
    union all
    select created_at, model_id, key_id, 'media', coalesce(cost_micro, 0), 0, 0
      from generations where account_id = ? and created_at >= ? and created_at < ?
  )
  select case when grouping(d) = 0 then 'day' when grouping(u.model) = 0 then 'model' else 'key' end as grp,
         d as day, u.model, min(u.kind) as kind, u.key_id, min(k.name) as key_name, min(k.prefix) as key_prefix, bool_or(k.revoked_at is not null) as key_revoked,
         count(*)::int as requests, sum(u.spent)::text as spent, sum(u.input_tokens)::text as input_tokens, sum(u.output_tokens)::text as output_tokens
    from u
    cross join lateral (select to_char(u.created_at at time zone 'UTC', 'YYYY-MM-DD') as d) dd
    left join api_keys k on k.id = u.key_id
   group by grouping sets ((d), (u.model), (u.key_id))`;

const totals = (r: Pick<Row, 'requests' | 'spent' | 'input_tokens' | 'output_tokens'>) => ({
  requests: r.requests,
  spent_coins: coinsToJson(BigInt(r.spent)),
  input_tokens: Number(r.input_tokens),
  output_tokens: Number(r.output_tokens),
});
const bySpend = (a: { spent: string; requests: number }, b: { spent: string; requests: number }) => {
  const x = BigInt(a.spent);
  const y = BigInt(b.spent);
  return x > y ? -1 : x < y ? 1 : b.requests - a.requests;
};

/** The account's usage over the range (its own account only: the session's). */
export async function accountUsage(em: EntityManager, accountId: string, input: z.output<typeof usageInput>, now: Date): Promise<UsageView> {
  const { from, to, days } = usageRange(input, now);
  const end = new Date(to.getTime() + DAY_MS);
  const rows = await em.execute<Row[]>(USAGE, [accountId, from, end, accountId, from, end]);
  const dayRows = new Map(rows.filter((r) => r.grp === 'day').map((r) => [r.day!, r]));
  const zero = { requests: 0, spent: '0', input_tokens: '0', output_tokens: '0' };
  const all = rows.filter((r) => r.grp === 'day');
  const sumOf = (f: 'spent' | 'input_tokens' | 'output_tokens') => all.reduce((s, r) => s + BigInt(r[f]), 0n).toString();
  return {
    object: 'usage',
    from: dayOf(from),
    to: dayOf(to),
    totals: totals({ requests: all.reduce((s, r) => s + r.requests, 0), spent: sumOf('spent'), input_tokens: sumOf('input_tokens'), output_tokens: sumOf('output_tokens') }),
    days: Array.from({ length: days }, (_, i) => {
      const day = dayOf(new Date(from.getTime() + i * DAY_MS));
      return { day, ...totals(dayRows.get(day) ?? zero) };
    }),
    models: rows
      .filter((r) => r.grp === 'model')
      .sort(bySpend)
      .map((r) => ({ model: r.model!, kind: r.kind!, ...totals(r) })),
    keys: rows
      .filter((r) => r.grp === 'key')
      .sort(bySpend)
      .map((r) => ({ key_id: r.key_id!, name: r.key_name ?? '', prefix: r.key_prefix ?? '', revoked: r.key_revoked ?? false, ...totals(r) })),
  };
}
