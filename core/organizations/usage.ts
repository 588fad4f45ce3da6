import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { Actor } from '../auth/principals.ts';
import { usageInput, usageRange } from '../accounts/usage.ts';
import { csvField } from '../accounts/history-csv.ts';
import { coinsToJson } from '../money/coins.ts';
import { coinsSchema } from '../views.ts';
import { readMember, type MemberView } from './members.ts';
import { organizationIdSchema, requireRole, type Role } from './roles.ts';

/**
 * What an organization's wallet spent, per member and per key, over a range of whole UTC days
 * (the organization's Usage page and its CSV; docs/organizations.md). The same two records as a
 * person's usage (core/accounts/usage.ts): chat records and media jobs of the organization's
 * account, each through the key that made it; the key's member (or the member who connected the
 * app whose key it is) is who spent. Admins and owners see every member; a member only themself.
 */
export const organizationUsageInput = z.object({ id: organizationIdSchema, from: usageInput.shape.from, to: usageInput.shape.to });

const totalsSchema = z.object({ requests: z.number().int(), spent_coins: coinsSchema, input_tokens: z.number().int(), output_tokens: z.number().int() });

export const organizationUsageSchema = z
  .object({
    object: z.literal('organization_usage'),
    organization_id: z.string(),
    from: z.string().describe('first day, inclusive, YYYY-MM-DD (UTC)'),
    to: z.string().describe('last day, inclusive, YYYY-MM-DD (UTC)'),
    scope: z.enum(['organization', 'member']).describe('organization: every member (admins, owners); member: the caller’s own use'),
    totals: totalsSchema.strict(),
    members: z.array(totalsSchema.extend({ user_id: z.string(), email: z.string() }).strict()).describe('most spent first'),
    keys: z.array(totalsSchema.extend({ key_id: z.string(), name: z.string(), prefix: z.string(), revoked: z.boolean(), user_id: z.string().nullable(), email: z.string().nullable() }).strict()).describe('most spent first'),
  })
  .strict();
export type OrganizationUsageView = z.infer<typeof organizationUsageSchema>;

const DAY_MS = 86_400_000;

/**
 * The organization's spend in the range, one row per day, key and model: what both the page's
 * sums and the CSV are made of. `member` set: only that member's keys.
 */
const ROWS = `
  with u as (
    select created_at, model, key_id, cost_micro as spent, prompt_tokens::bigint as input_tokens, completion_tokens::bigint as output_tokens
      from completion_records where account_id = ? and created_at >= ? and created_at < ?
    union all
    select created_at, model_id, key_id, coalesce(cost_micro, 0), 0, 0
      from generations where account_id = ? and created_at >= ? and created_at < ?
  )
  select to_char(u.created_at at time zone 'UTC', 'YYYY-MM-DD') as day, u.model, u.key_id,
         min(k.name) as key_name, min(k.prefix) as key_prefix, bool_or(k.revoked_at is not null) as key_revoked,
         min(coalesce(k.member_id, c.member_id)) as member_id, min(p.email) as email,
         count(*)::int as requests, sum(u.spent)::text as spent, sum(u.input_tokens)::text as input_tokens, sum(u.output_tokens)::text as output_tokens
    from u
    left join api_keys k on k.id = u.key_id
    left join app_connections c on c.key_id = u.key_id
    left join accounts p on p.id = coalesce(k.member_id, c.member_id)
   where (?::text is null or coalesce(k.member_id, c.member_id) = ?)
   group by 1, 2, 3
   order by 1, 3, 2`;

interface Row {
  day: string;
  model: string;
  key_id: string;
  key_name: string | null;
  key_prefix: string | null;
  key_revoked: boolean | null;
  member_id: string | null;
  email: string | null;
  requests: number;
  spent: string;
  input_tokens: string;
  output_tokens: string;
}

type Sums = { requests: number; spent: bigint; input: bigint; output: bigint };
const zero = (): Sums => ({ requests: 0, spent: 0n, input: 0n, output: 0n });
const add = (s: Sums, r: Row) => {
  s.requests += r.requests;
  s.spent += BigInt(r.spent);
  s.input += BigInt(r.input_tokens);
  s.output += BigInt(r.output_tokens);
};
const totals = (s: Sums) => ({ requests: s.requests, spent_coins: coinsToJson(s.spent), input_tokens: Number(s.input), output_tokens: Number(s.output) });
const bySpend = (a: { s: Sums }, b: { s: Sums }) => (a.s.spent > b.s.spent ? -1 : a.s.spent < b.s.spent ? 1 : b.s.requests - a.s.requests);

async function readRows(em: EntityManager, actor: Actor, input: z.output<typeof organizationUsageInput>, now: Date, maxDays?: number) {
  const role: Role = await requireRole(em, actor, input.id, 'member');
  const { from, to } = usageRange(input, now, maxDays);
  const end = new Date(to.getTime() + DAY_MS);
  const member = role === 'member' ? actor.personId : null;
  const rows = await em.execute<Row[]>(ROWS, [input.id, from, end, input.id, from, end, member, member]);
  return { rows, from, to, scope: role === 'member' ? ('member' as const) : ('organization' as const) };
}

const dayOf = (d: Date) => d.toISOString().slice(0, 10);

/** The organization's usage per member and per key over the range (at most 366 days). */
export async function organizationUsage(em: EntityManager, actor: Actor, input: z.output<typeof organizationUsageInput>, now: Date): Promise<OrganizationUsageView> {
  const { rows, from, to, scope } = await readRows(em, actor, input, now);
  const all = zero();
  const members = new Map<string, { user_id: string; email: string; s: Sums }>();
  const keys = new Map<string, { key_id: string; name: string; prefix: string; revoked: boolean; user_id: string | null; email: string | null; s: Sums }>();
  for (const r of rows) {
    add(all, r);
    if (r.member_id) {
      const m = members.get(r.member_id) ?? { user_id: r.member_id, email: r.email ?? '', s: zero() };
      add(m.s, r);
      members.set(r.member_id, m);
    }
    const k = keys.get(r.key_id) ?? { key_id: r.key_id, name: r.key_name ?? '', prefix: r.key_prefix ?? '', revoked: r.key_revoked ?? false, user_id: r.member_id, email: r.email, s: zero() };
    add(k.s, r);
    keys.set(r.key_id, k);
  }
  return {
    object: 'organization_usage',
    organization_id: input.id,
    from: dayOf(from),
    to: dayOf(to),
    scope,
    totals: totals(all),
    members: [...members.values()].sort(bySpend).map(({ s, ...m }) => ({ ...m, ...totals(s) })),
    keys: [...keys.values()].sort(bySpend).map(({ s, ...k }) => ({ ...k, ...totals(s) })),
  };
}

const COLUMNS = ['day', 'user_id', 'email', 'key_id', 'key_name', 'key_prefix', 'model', 'requests', 'spent_coins', 'input_tokens', 'output_tokens'] as const;

/**
 * The same usage as CSV (RFC 4180, as the wallet history's download): one row per day, key and
 * model, oldest first; an admin's has every member's rows, a member's their own.
 */
export async function organizationUsageCsv(em: EntityManager, actor: Actor, input: z.output<typeof organizationUsageInput>, now: Date) {
  const { rows, from, to } = await readRows(em, actor, input, now);
  const lines = [COLUMNS.join(',')];
  for (const r of rows) {
    lines.push(
      [r.day, r.member_id ?? '', r.email ?? '', r.key_id, r.key_name ?? '', r.key_prefix ?? '', r.model, String(r.requests), String(coinsToJson(BigInt(r.spent))), r.input_tokens, r.output_tokens]
        .map(csvField)
        .join(','),
    );
  }
  return {
    object: 'organization_usage_csv' as const,
    filename: `organization-usage-${input.id}-${dayOf(from)}-to-${dayOf(to)}.csv`,
    content_type: 'text/csv; charset=utf-8',
    rows: rows.length,
    csv: `${lines.join('\r\n')}\r\n`,
  };
}

/** The caller's own membership: role, spend limit and what they spent in its period (every member sees their own). */
export async function ownMembership(em: EntityManager, actor: Actor, organizationId: string): Promise<MemberView> {
  await requireRole(em, actor, organizationId, 'member');
  return readMember(em, organizationId, actor.personId);
}
