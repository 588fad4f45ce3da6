import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { AppConnectionView } from '../../apps/connections.ts';
import { coinsToJson } from '../../money/coins.ts';
import { accountId } from './accounts.ts';
import { checkCursor, Conditions, iso, pageInput, pageOf, prefixedId, timeRangeInput } from './paging.ts';

export const appConnectionListInput = pageInput.merge(timeRangeInput).extend({
  account: accountId.optional(),
  revoked: z.boolean().optional(),
  after: prefixedId('app').optional(),
});

interface Row {
  id: string;
  account_id: string;
  key_id: string;
  client_id: string;
  client_name: string;
  redirect_host: string;
  spend_cap_micro: string | null;
  spent_micro: string;
  expires_at: Date | string | null;
  created_at: Date | string;
  reconnected_at: Date | string | null;
  last_used_at: Date | string | null;
  revoked_at: Date | string | null;
}

/** The account pages' view of a connection (core/apps/connections.ts), with what operators also need: its account, key and client. */
export type AdminAppConnectionView = AppConnectionView & { account: string; key: string; client_id: string };

const view = (r: Row): AdminAppConnectionView => ({
  id: r.id,
  object: 'app_connection',
  account: r.account_id,
  key: r.key_id,
  client_id: r.client_id,
  name: r.client_name,
  redirect_host: r.redirect_host,
  spend_cap_coins: r.spend_cap_micro === null ? null : coinsToJson(BigInt(r.spend_cap_micro)),
  spent_coins: coinsToJson(BigInt(r.spent_micro)),
  expires_at: iso(r.expires_at),
  created_at: iso(r.created_at)!,
  reconnected_at: iso(r.reconnected_at),
  last_used_at: iso(r.last_used_at),
  revoked_at: iso(r.revoked_at),
});

/** Spend is what the connection's key was charged, as the account pages count it (core/apps/connections.ts). */
const SELECT = `select c.id, c.account_id, c.key_id, c.client_id, c.client_name, c.redirect_host, c.spend_cap_micro::text, c.expires_at, c.created_at,
    c.reconnected_at, c.revoked_at, greatest(c.last_used_at, k.last_used_at) as last_used_at,
    coalesce((select -sum(e.amount_micro) from ledger_entries e join holds h on h.id = e.hold_id
              where e.account_id = c.account_id and e.kind = 'capture' and h.metadata->>'key_id' = c.key_id), 0)::text as spent_micro
  from app_connections c join api_keys k on k.id = c.key_id`;

/** Apps connected through OAuth, of every account (or one), newest first. */
export async function listAdminAppConnections(em: EntityManager, input: z.output<typeof appConnectionListInput>) {
  const where = new Conditions().range('c.created_at', input).after('c', 'app_connections', input.after);
  where.addIf(input.account, 'c.account_id = ?');
  if (input.revoked !== undefined) where.add(input.revoked ? 'c.revoked_at is not null' : 'c.revoked_at is null');
  const rows = await em.execute<Row[]>(`${SELECT} ${where.sql()} order by c.created_at desc, c.id desc limit ?`, [...where.params, input.first + 1]);
  await checkCursor(em, 'app_connections', input.after, rows);
  return pageOf(rows.map(view), input.first);
}
