import { Migration } from '@mikro-orm/migrations';

/**
 * A key without a spend limit costs a reservation nothing again (bench/RESULTS.md, "Chat
 * throughput after issue 34"). Migration20261203000000_key_limits said that unlimited keys were
 * never locked, and they were not, but mas_reserve_many still called mas_key_spend_room for
 * every item with a key id. That function summed every past hold of the key through
 * holds_by_key before it found no limit: 600 to 2,200 holds rows read per chat for a busy key,
 * under the wallet's lock, in the hold batcher's one reservation in flight, which halved chat
 * throughput at c=32.
 *
 * - mas_key_spend_room answers null for a key without a limit, with nothing summed.
 * - mas_reserve_many collects the ids of the limited keys it already locks (in id order, before
 *   any wallet, as before), and asks for the room only for items whose key is among them.
 *
 * Limited keys are locked and checked exactly as before. mas_reserve (one hold) checked for a
 * limit first already and is unchanged.
 */
export class Migration20261207000000_key_room_limited_only extends Migration {
  override async up(): Promise<void> {
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_key_spend_room(p_key_id text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
        select k.spend_limit_micro
          - coalesce((
              select sum(h.amount_micro) from holds h
              where h.metadata ? 'key_id' and h.metadata->>'key_id' = p_key_id and h.ended_at is null and h.status = 'open'
            ), 0)::bigint
          - coalesce((
              select sum(h.captured_micro) from holds h
              where h.metadata ? 'key_id' and h.metadata->>'key_id' = p_key_id
                and h.ended_at >= mas_key_period_start(k.spend_limit_period) and h.status = 'settled'
            ), 0)::bigint
        from api_keys k where k.id = p_key_id and k.spend_limit_micro is not null
      $function$;
CREATE OR REPLACE FUNCTION public.mas_reserve_many(p_items jsonb)
 RETURNS TABLE(i integer, status text, available bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        x record;
        acct text;              -- the account whose wallet is in w (locked), once one is
        w wallets%rowtype;      -- that wallet as the items so far have left it
        dirty boolean := false; -- w differs from the stored row
        key_ok text;            -- the key and account last found active in this batch
        from_sub bigint;
        from_pur bigint;
        l_account text[] := '{}';
        l_pocket text[] := '{}';
        l_amount bigint[] := '{}';
        l_after bigint[] := '{}';
        l_reference text[] := '{}';
        l_hold text[] := '{}';
        room bigint;
        limited text[];         -- the keys of the batch that have a spend limit (locked)
      begin
        -- See migration reserve_commits_async: the settle's synchronous commit makes this durable.
        perform set_config('synchronous_commit', 'off', true);
        -- The capped app connections of the batch are locked first, in id order, before any wallet.
        perform 1 from app_connections c
          where c.spend_cap_micro is not null
            and c.id in (select e->'metadata'->>'app_connection_id' from jsonb_array_elements(p_items) e)
          order by c.id for update;
        -- Then the keys of the batch that have a spend limit, in id order, still before any wallet.
        select coalesce(array_agg(l.id), '{}') into limited from (
          select k.id from api_keys k
            where k.spend_limit_micro is not null
              and k.id in (select e->'metadata'->>'key_id' from jsonb_array_elements(p_items) e)
            order by k.id for update) l;
        for x in
          select * from jsonb_to_recordset(p_items)
            as t (i int, hold_id text, account_id text, amount bigint, reference text, expires_at timestamptz, metadata jsonb, key_id text)
          order by t.account_id, t.i
        loop
          i := x.i;
          if x.key_id is not null and key_ok is distinct from x.key_id || '/' || x.account_id then
            if not exists (
              select 1 from api_keys k join accounts a on a.id = k.account_id
              where k.id = x.key_id and k.account_id = x.account_id and k.revoked_at is null and a.disabled_at is null
                and (k.expires_at is null or k.expires_at > now())
            ) then
              status := 'key_revoked'; available := null;
              return next;
              continue;
            end if;
            key_ok := x.key_id || '/' || x.account_id;
          end if;
          if x.metadata ? 'app_connection_id' then
            room := mas_app_spend_room(x.metadata->>'app_connection_id');
            if room < x.amount then
              status := 'spend_cap_reached'; available := greatest(room, 0);
              return next;
              continue;
            end if;
          end if;
          if x.metadata->>'key_id' = any(limited) then
            room := mas_key_spend_room(x.metadata->>'key_id');
            if room < x.amount then
              status := 'key_spend_limit_reached'; available := greatest(room, 0);
              return next;
              continue;
            end if;
          end if;
          if x.amount < 0 then
            raise exception 'reserve amount must not be negative';
          end if;
          if acct is distinct from x.account_id then
            if dirty then
              perform mas_write_wallet(w);
              dirty := false;
            end if;
            acct := x.account_id;
            select * into w from wallets where account_id = acct for update;
          end if;
          if w.account_id is null then
            status := 'no_wallet'; available := null;
            return next;
            continue;
          end if;
          if w.purchased_micro < 0 then
            status := case when exists (select 1 from holds h where h.id = x.hold_id) then 'exists' else 'negative_balance' end;
            available := w.purchased_micro;
            return next;
            continue;
          end if;
          if w.subscription_micro + w.purchased_micro < x.amount then
            status := case when exists (select 1 from holds h where h.id = x.hold_id) then 'exists' else 'insufficient' end;
            available := w.subscription_micro + w.purchased_micro;
            return next;
            continue;
          end if;
          from_sub := least(w.subscription_micro, x.amount);
          from_pur := x.amount - from_sub;
          insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, reference, metadata, expires_at)
            values (x.hold_id, x.account_id, x.amount, from_sub, from_pur, x.reference, coalesce(x.metadata, '{}'), x.expires_at)
            on conflict (id) do nothing;
          if not found then
            status := 'exists'; available := w.subscription_micro + w.purchased_micro;
            return next;
            continue;
          end if;
          w.subscription_micro := w.subscription_micro - from_sub;
          w.purchased_micro := w.purchased_micro - from_pur;
          w.held_micro := w.held_micro + x.amount;
          dirty := true;
          if from_sub <> 0 then
            l_account := l_account || x.account_id; l_pocket := l_pocket || 'subscription'::text; l_amount := l_amount || -from_sub;
            l_after := l_after || w.subscription_micro; l_reference := l_reference || x.reference; l_hold := l_hold || x.hold_id;
          end if;
          if from_pur <> 0 then
            l_account := l_account || x.account_id; l_pocket := l_pocket || 'purchased'::text; l_amount := l_amount || -from_pur;
            l_after := l_after || w.purchased_micro; l_reference := l_reference || x.reference; l_hold := l_hold || x.hold_id;
          end if;
          if x.amount <> 0 then
            l_account := l_account || x.account_id; l_pocket := l_pocket || 'held'::text; l_amount := l_amount || x.amount;
            l_after := l_after || w.held_micro; l_reference := l_reference || x.reference; l_hold := l_hold || x.hold_id;
          end if;
          status := 'reserved'; available := w.subscription_micro + w.purchased_micro;
          return next;
        end loop;
        if dirty then
          perform mas_write_wallet(w);
        end if;
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description)
        select u.account, u.pocket, 'reservation', u.amount, u.after, u.reference, u.hold, u.hold || ':reserve:' || u.pocket, 'Reservation'
        from unnest(l_account, l_pocket, l_amount, l_after, l_reference, l_hold) with ordinality
          as u (account, pocket, amount, after, reference, hold, ord)
        order by u.ord;
      end $function$;`);
  }

  override async down(): Promise<void> {
    throw new Error('not reversible: restore mas_key_spend_room and mas_reserve_many from Migration20261203000000_key_limits first');
  }
}
