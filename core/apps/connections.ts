import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { notFound } from '../errors.ts';
import { liveConnectionsOf } from '../oauth/authorize.ts';
import { coinsToJson } from '../money/coins.ts';
import { coinsSchema, isoTimeSchema } from '../views.ts';

/**
 * Apps connected through OAuth: each spends through its own key of the account (SPEC part 5).
 * The account pages list them with their last use and spend so far, and revoke them: the
 * connection and its key end together, so the app is refused on its next call.
 */
export const appConnectionSchema = z
  .object({
    id: z.string(),
    object: z.literal('app_connection'),
    name: z.string().describe("the app's client_name"),
    redirect_host: z.string().describe('the host the app signs in through: a name can lie, this cannot'),
    spend_cap_coins: coinsSchema.nullable(),
    spent_coins: coinsSchema.describe('what its key has been charged so far'),
    expires_at: isoTimeSchema.nullable(),
    created_at: isoTimeSchema.describe('when the app was first connected'),
    reconnected_at: isoTimeSchema.nullable().describe('when the person last approved it again, which replaced its tokens, cap and lifetime (docs/oauth.md)'),
    last_used_at: isoTimeSchema.nullable(),
    revoked_at: isoTimeSchema.nullable(),
    organization: z
      .object({ id: z.string(), name: z.string() })
      .nullable()
      .optional()
      .describe('the organization whose wallet the app spends from (the person chose it when allowing the app); null: their own'),
  })
  .strict();
export type AppConnectionView = z.infer<typeof appConnectionSchema>;

export const appConnectionIdInput = z.object({ id: z.string().trim().regex(/^app_[0-9A-Za-z]{1,64}$/, 'must be an app connection id such as app_…') });

interface Row {
  id: string;
  client_name: string;
  redirect_host: string;
  spend_cap_micro: string | null;
  spent_micro: string;
  expires_at: Date | null;
  created_at: Date;
  reconnected_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
  organization_id: string | null;
  organization_name: string | null;
}

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

function view(r: Row): AppConnectionView {
  return {
    id: r.id,
    object: 'app_connection',
    name: r.client_name,
    redirect_host: r.redirect_host,
    spend_cap_coins: r.spend_cap_micro === null ? null : coinsToJson(BigInt(r.spend_cap_micro)),
    spent_coins: coinsToJson(BigInt(r.spent_micro)),
    expires_at: iso(r.expires_at),
    created_at: new Date(r.created_at).toISOString(),
    reconnected_at: iso(r.reconnected_at),
    last_used_at: iso(r.last_used_at ?? null),
    revoked_at: iso(r.revoked_at),
    organization: r.organization_id ? { id: r.organization_id, name: r.organization_name ?? r.organization_id } : null,
  };
}

/** Spend is what the connection's key was charged: its captures in the ledger. */
const SELECT = `select c.id, c.client_name, c.redirect_host, c.spend_cap_micro::text, c.expires_at, c.created_at, c.reconnected_at, c.revoked_at,
    greatest(c.last_used_at, k.last_used_at) as last_used_at,
    case when c.member_id is not null then c.account_id end as organization_id,
    (select o.name from accounts o where o.id = c.account_id and c.member_id is not null) as organization_name,
    coalesce((select -sum(e.amount_micro) from ledger_entries e join holds h on h.id = e.hold_id
              where e.account_id = c.account_id and e.kind = 'capture' and h.metadata->>'key_id' = c.key_id), 0)::text as spent_micro
  from app_connections c join api_keys k on k.id = c.key_id`;

/**
 * The person's connections: the apps they allowed on their own wallet, and those they allowed on
 * an organization's (member_id), which they see and revoke alike.
 */
const MINE = '((c.account_id = ? and c.member_id is null) or c.member_id = ?)';

export async function listAppConnections(em: EntityManager, accountId: string) {
  const rows = await em.execute<Row[]>(`${SELECT} where ${MINE} order by c.created_at desc, c.id`, [accountId, accountId]);
  return { object: 'list' as const, data: rows.map(view) };
}

export const liveAppConnectionInput = z.object({ client_id: z.string().max(2000), name: z.string().max(200), redirect_host: z.string().max(300) });

/**
 * The account's live connection of this app, which allowing it again would replace (docs/oauth.md,
 * "Reconnecting an app"), for the consent page to say so; null when there is none.
 */
export async function liveAppConnection(em: EntityManager, accountId: string, input: z.output<typeof liveAppConnectionInput>, now: Date): Promise<AppConnectionView | null> {
  const [live] = await liveConnectionsOf(em, accountId, { clientId: input.client_id, name: input.name, host: input.redirect_host }, now);
  if (!live) return null;
  const [row] = await em.execute<Row[]>(`${SELECT} where c.id = ?`, [live.id]);
  return view(row!);
}

/** Revokes the person's connection (on their wallet or an organization's) and its key, at once and for good; another's is as unknown as a missing one. Idempotent. */
export async function revokeAppConnection(em: EntityManager, accountId: string, id: string): Promise<AppConnectionView> {
  return em.transactional(async (tx) => {
    const [found] = await tx.execute<{ key_id: string }[]>(`select key_id from app_connections c where c.id = ? and ${MINE} for update`, [id, accountId, accountId]);
    if (!found) throw notFound('app_connection_not_found', `No connected app ${id}.`);
    await tx.execute('update app_connections set revoked_at = coalesce(revoked_at, now()) where id = ?', [id]);
    await tx.execute('update api_keys set revoked_at = coalesce(revoked_at, now()) where id = ?', [found.key_id]);
    const [row] = await tx.execute<Row[]>(`${SELECT} where c.id = ?`, [id]);
    return view(row!);
  });
}
