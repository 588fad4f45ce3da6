import { Migration } from '@mikro-orm/migrations';

/**
 * OAuth for MCP clients (issue 17, docs/oauth.md): registered clients, single-use
 * authorization codes, and access and refresh tokens, all stored as SHA-256 of the secret.
 * Each approved app gets an app connection and a key of its own (`api_keys.kind = 'app'`),
 * which does not count toward the account's 10 keys.
 *
 * The spend cap of an app connection is enforced where coins are reserved: a reservation whose
 * hold metadata names an app connection with a cap fits only while what the connection has
 * captured plus what it holds open, plus the new amount, stays within the cap. The capped
 * connection's row is locked first (before any wallet), so concurrent reservations of one app
 * cannot pass the cap together, and the lock order stays connection, then wallet.
 */
export class Migration20261125000000_oauth extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table api_keys add column kind text not null default 'standard' check (kind in ('standard', 'app'));
      update api_keys k set kind = 'app' where exists (select 1 from app_connections c where c.key_id = k.id);

      create table oauth_clients (
        client_id text primary key,
        client_name text not null,
        redirect_uris jsonb not null,
        metadata jsonb not null,
        created_at timestamptz not null default now()
      );

      create table oauth_codes (
        code_hash text primary key,
        client_id text not null,
        client_name text not null,
        redirect_uri text not null,
        code_challenge text not null,
        resource text not null,
        account_id text not null references accounts (id),
        spend_cap_micro bigint check (spend_cap_micro is null or spend_cap_micro > 0),
        lifetime_days int check (lifetime_days is null or lifetime_days > 0),
        expires_at timestamptz not null,
        created_at timestamptz not null default now(),
        used_at timestamptz,
        connection_id text references app_connections (id)
      );
      create index oauth_codes_expiry on oauth_codes (expires_at);

      create table oauth_tokens (
        token_hash text primary key,
        kind text not null check (kind in ('access', 'refresh')),
        connection_id text not null references app_connections (id),
        client_id text not null,
        resource text not null,
        expires_at timestamptz not null,
        created_at timestamptz not null default now(),
        rotated_at timestamptz
      );
      create index oauth_tokens_connection on oauth_tokens (connection_id);

      -- What an app connection has spent and holds: only holds that name one are indexed.
      create index holds_by_app_connection on holds ((metadata->>'app_connection_id')) where metadata ? 'app_connection_id';
    `);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_app_spend_room(p_connection_id text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
        select c.spend_cap_micro - coalesce((
          select sum(case h.status when 'open' then h.amount_micro when 'settled' then h.captured_micro else 0 end)
          from holds h
          where h.metadata ? 'app_connection_id' and h.metadata->>'app_connection_id' = p_connection_id
        ), 0)::bigint
        from app_connections c where c.id = p_connection_id
      $function$;`);
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
        select * into w from wallets where account_id = p_account for update;
        if not found then
          return query select 'no_wallet'::text, null::bigint;
          return;
        end if;
        if exists (select 1 from holds where id = p_hold_id) then
          return query select 'exists'::text, w.subscription_micro + w.purchased_micro;
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
      end $function$;`);
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
        for x in
          select * from jsonb_to_recordset(p_items)
            as t (i int, hold_id text, account_id text, amount bigint, reference text, expires_at timestamptz, metadata jsonb, key_id text)
          order by t.account_id, t.i
        loop
          i := x.i;
          if x.key_id is not null and key_ok is distinct from x.key_id || '/' || x.account_id then
            if not exists (
              select 1 from api_keys k where k.id = x.key_id and k.account_id = x.account_id and k.revoked_at is null
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
    throw new Error('not reversible: restore the previous mas_reserve functions from git history first');
  }
}
