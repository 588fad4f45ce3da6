import { Migration } from '@mikro-orm/migrations';

/**
 * Limits on a standard API key (docs/api.md, "Key limits"; docs/accounts.md, "API keys"):
 *
 * - api_keys.spend_limit_micro + spend_limit_period ('total' over the key's life, or 'monthly':
 *   the calendar month in UTC): both set or both null. Enforced inside mas_reserve and
 *   mas_reserve_many, as an app connection's spend cap is: the key row is locked (lock order:
 *   app connection, key, wallet; mas_reserve_many locks the batch's limited keys in id order
 *   after the capped connections and before any wallet), and the room is the limit minus the
 *   key's open holds minus what it captured in the period ('key_spend_limit_reached'). Keys
 *   without a limit are never locked, so the hot path of an unlimited key is unchanged.
 * - How a hold knows its key: holds.metadata->>'key_id' (chat and media jobs write it). The
 *   spend is summed from holds through holds_by_key, (key id, ended_at) with status and
 *   amounts included: open holds (ended_at null) and the holds settled since the period began
 *   are two index-only range scans. No running counter: a counter would have to be updated by
 *   mas_end_hold(_many) under the key's lock, adding a lock to every settle and a reset rule for
 *   months; the index keeps the settle functions as they are.
 * - api_keys.expires_at: an expired key is refused at the door (core/auth/api-keys.ts) and by
 *   mas_reserve_many's key check (a key cached on the chat path that expired since).
 * - api_keys.allowed_models: the model ids the key may use; null = all (core/keys/limits.ts).
 * - An edit of expires_at or allowed_models notifies 'key' like a revoke, so every instance's
 *   cache of recent keys forgets the key (core/changes.ts).
 */
export class Migration20261203000000_key_limits extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table api_keys
        add column spend_limit_micro bigint check (spend_limit_micro > 0),
        add column spend_limit_period text check (spend_limit_period in ('total', 'monthly')),
        add column expires_at timestamptz,
        add column allowed_models text[],
        add constraint api_keys_spend_limit_both check ((spend_limit_micro is null) = (spend_limit_period is null));
      create index holds_by_key on holds ((metadata->>'key_id'), ended_at) include (status, amount_micro, captured_micro) where metadata ? 'key_id';
      create trigger api_keys_limits_changed after update of expires_at, allowed_models on api_keys
        for each row when (old.expires_at is distinct from new.expires_at or old.allowed_models is distinct from new.allowed_models)
        execute function mas_notify_change('key');
    `);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_key_period_start(p_period text)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
        select case p_period when 'monthly' then date_trunc('month', now(), 'UTC') else '-infinity'::timestamptz end
      $function$`);
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
        from api_keys k where k.id = p_key_id
      $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_reserve(p_hold_id text, p_account text, p_amount bigint, p_reference text, p_expires_at timestamp with time zone, p_metadata jsonb)
 RETURNS TABLE(status text, available bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        w wallets%rowtype;
        from_sub bigint;
        from_pur bigint;
        room bigint;
      begin
        if p_amount < 0 then
          raise exception 'reserve amount must not be negative';
        end if;
        -- An app connection's spend cap: its row is locked before the wallet (lock order: connection, wallet).
        if p_metadata ? 'app_connection_id' then
          perform 1 from app_connections c where c.id = p_metadata->>'app_connection_id' and c.spend_cap_micro is not null for update;
          room := mas_app_spend_room(p_metadata->>'app_connection_id');
          if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then
            return query select 'spend_cap_reached'::text, greatest(room, 0);
            return;
          end if;
        end if;
        -- A standard key's spend limit: its row is locked after the connection, before the wallet
        -- (lock order: connection, key, wallet). A key without a limit is not locked.
        if p_metadata ? 'key_id' then
          perform 1 from api_keys k where k.id = p_metadata->>'key_id' and k.spend_limit_micro is not null for update;
          if found then
            room := mas_key_spend_room(p_metadata->>'key_id');
            if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then
              return query select 'key_spend_limit_reached'::text, greatest(room, 0);
              return;
            end if;
          end if;
        end if;
        select * into w from wallets where account_id = p_account for update;
        if not found then
          return query select 'no_wallet'::text, null::bigint;
          return;
        end if;
        if exists (select 1 from holds where id = p_hold_id) then
          return query select 'exists'::text, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        if w.purchased_micro < 0 then
          return query select 'negative_balance'::text, w.purchased_micro;
          return;
        end if;
        if w.subscription_micro + w.purchased_micro < p_amount then
          return query select 'insufficient'::text, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        from_sub := least(w.subscription_micro, p_amount);
        from_pur := p_amount - from_sub;
        update wallets set
          subscription_micro = subscription_micro - from_sub,
          purchased_micro = purchased_micro - from_pur,
          held_micro = held_micro + p_amount,
          updated_at = now()
        where account_id = p_account
        returning * into w;
        insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, reference, metadata, expires_at)
          values (p_hold_id, p_account, p_amount, from_sub, from_pur, p_reference, coalesce(p_metadata, '{}'), p_expires_at);
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description)
        select p_account, x.pocket, 'reservation', x.amount, x.after, p_reference, p_hold_id, p_hold_id || ':reserve:' || x.pocket, 'Reservation'
        from (values
          ('subscription', -from_sub, w.subscription_micro),
          ('purchased', -from_pur, w.purchased_micro),
          ('held', p_amount, w.held_micro)
        ) as x (pocket, amount, after)
        where x.amount <> 0;
        return query select 'reserved'::text, w.subscription_micro + w.purchased_micro;
      end $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_reserve_many(p_items jsonb)
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
      begin
        -- See migration reserve_commits_async: the settle's synchronous commit makes this durable.
        perform set_config('synchronous_commit', 'off', true);
        -- The capped app connections of the batch are locked first, in id order, before any wallet.
        perform 1 from app_connections c
          where c.spend_cap_micro is not null
            and c.id in (select e->'metadata'->>'app_connection_id' from jsonb_array_elements(p_items) e)
          order by c.id for update;
        -- Then the keys of the batch that have a spend limit, in id order, still before any wallet.
        perform 1 from api_keys k
          where k.spend_limit_micro is not null
            and k.id in (select e->'metadata'->>'key_id' from jsonb_array_elements(p_items) e)
          order by k.id for update;
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
          if x.metadata ? 'key_id' then
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
      end $function$`);
  }

  override async down(): Promise<void> {
    throw new Error('not reversible: mas_reserve and mas_reserve_many now call mas_key_spend_room; restore the previous functions from git history first');
  }
}
