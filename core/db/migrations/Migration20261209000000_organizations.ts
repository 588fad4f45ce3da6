import { Migration } from '@mikro-orm/migrations';

/**
 * Organizations (issue 49, docs/organizations.md): a team shares one wallet, and software manages
 * keys through management keys.
 *
 * - An organization is a row of `accounts` with kind `organization` and a name, so that its wallet,
 *   ledger, holds, payments, subscription and auto top-up are an account's, under the same money
 *   functions. Its `email` is where its billing mail goes (the owner who made it); only people
 *   sign in, so e-mails are unique among people only.
 * - organization_members: a person's role in an organization (owner, admin, member) and the spend
 *   limit an admin set for them (over all their keys of the organization, per `total` or
 *   `monthly` period, like a key's).
 * - organization_invitations: bound to one e-mail, single use, valid 7 days, revocable; only the
 *   SHA-256 of the link's token is stored.
 * - api_keys.member_id: the person who owns a key of an organization's wallet (null on a personal
 *   key); kind `management`: a key that manages keys and organizations and cannot call models;
 *   disabled_at: a key switched off (401, saying so) that can be switched on again. A change of
 *   disabled_at is announced like a revocation (mas_changes), so cached keys drop it (as a change
 *   of allowed_models or expires_at is since Migration20261203000000_key_limits).
 * - app_connections.member_id: the person who allowed an app to spend an organization's coins.
 * - mas_member_spend_room, and mas_reserve / mas_reserve_many check the member's limit in the same
 *   statement as the key's limit and the balance, with the member's row locked after the key's and
 *   before the wallet (lock order: connection, key, member, wallet): no member overspends under
 *   concurrency, across instances. mas_reserve_many also refuses a disabled key ('key_revoked').
 */
export class Migration20261209000000_organizations extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table accounts add column kind text not null default 'person' check (kind in ('person', 'organization'));
      alter table accounts add column name text check (name is null or length(name) between 1 and 100);
      alter table accounts add constraint accounts_organization_named check (kind = 'person' or name is not null);
      drop index accounts_email_key;
      create unique index accounts_email_key on accounts (lower(email)) where kind = 'person';

      create table organization_members (
        organization_id text not null references accounts (id),
        account_id text not null references accounts (id),
        role text not null check (role in ('owner', 'admin', 'member')),
        spend_limit_micro bigint check (spend_limit_micro >= 0),
        spend_limit_period text check (spend_limit_period in ('total', 'monthly')),
        created_at timestamptz not null default now(),
        primary key (organization_id, account_id),
        check ((spend_limit_micro is null) = (spend_limit_period is null))
      );
      create index organization_members_by_person on organization_members (account_id);

      create table organization_invitations (
        id text primary key,
        organization_id text not null references accounts (id),
        email text not null,
        role text not null check (role in ('owner', 'admin', 'member')),
        token_hash text not null unique,
        invited_by text not null references accounts (id),
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        accepted_at timestamptz,
        accepted_by text references accounts (id),
        revoked_at timestamptz,
        check (accepted_at is null or revoked_at is null)
      );
      create index organization_invitations_by_organization on organization_invitations (organization_id, created_at desc);

      alter table api_keys add column member_id text references accounts (id);
      alter table api_keys add column disabled_at timestamptz;
      alter table api_keys drop constraint api_keys_kind_check;
      alter table api_keys add constraint api_keys_kind_check check (kind in ('standard', 'app', 'management'));
      create index api_keys_by_member on api_keys (account_id, member_id) where member_id is not null;

      alter table app_connections add column member_id text references accounts (id);

      create trigger api_keys_disabled after update of disabled_at on api_keys
        for each row when (old.disabled_at is distinct from new.disabled_at) execute function mas_notify_change('key');
    `);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_member_spend_room(p_key_id text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
        select m.spend_limit_micro
          - coalesce((
              select sum(h.amount_micro) from api_keys mk join holds h on h.metadata ? 'key_id' and h.metadata->>'key_id' = mk.id
              where mk.account_id = k.account_id and mk.member_id = k.member_id and h.ended_at is null and h.status = 'open'
            ), 0)::bigint
          - coalesce((
              select sum(h.captured_micro) from api_keys mk join holds h on h.metadata ? 'key_id' and h.metadata->>'key_id' = mk.id
              where mk.account_id = k.account_id and mk.member_id = k.member_id
                and h.ended_at >= mas_key_period_start(m.spend_limit_period) and h.status = 'settled'
            ), 0)::bigint
        from api_keys k join organization_members m on m.organization_id = k.account_id and m.account_id = k.member_id
        where k.id = p_key_id and m.spend_limit_micro is not null
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
          -- An organization member's spend limit (over all their keys of the organization): the member's
          -- row is locked after the key, before the wallet (lock order: connection, key, member, wallet).
          perform 1 from api_keys k join organization_members m on m.organization_id = k.account_id and m.account_id = k.member_id
            where k.id = p_metadata->>'key_id' and m.spend_limit_micro is not null for update of m;
          if found then
            room := mas_member_spend_room(p_metadata->>'key_id');
            if room < p_amount and not exists (select 1 from holds where id = p_hold_id) then
              return query select 'member_spend_limit_reached'::text, greatest(room, 0);
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
        limited text[];         -- the keys of the batch that have a spend limit (locked)
        member_limited text[];  -- the keys of the batch whose organization member has a spend limit (member locked)
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
        -- Then the organization members with a spend limit whose keys are in the batch, in (organization,
        -- person) order, still before any wallet (lock order: connection, key, member, wallet).
        select coalesce(array_agg(l.id), '{}') into member_limited from (
          select k.id from api_keys k join organization_members m on m.organization_id = k.account_id and m.account_id = k.member_id
            where m.spend_limit_micro is not null
              and k.id in (select e->'metadata'->>'key_id' from jsonb_array_elements(p_items) e)
            order by m.organization_id, m.account_id, k.id for update of m) l;
        for x in
          select * from jsonb_to_recordset(p_items)
            as t (i int, hold_id text, account_id text, amount bigint, reference text, expires_at timestamptz, metadata jsonb, key_id text)
          order by t.account_id, t.i
        loop
          i := x.i;
          if x.key_id is not null and key_ok is distinct from x.key_id || '/' || x.account_id then
            if not exists (
              select 1 from api_keys k join accounts a on a.id = k.account_id
              where k.id = x.key_id and k.account_id = x.account_id and k.revoked_at is null and k.disabled_at is null and a.disabled_at is null
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
          if x.metadata->>'key_id' = any(member_limited) then
            room := mas_member_spend_room(x.metadata->>'key_id');
            if room < x.amount then
              status := 'member_spend_limit_reached'; available := greatest(room, 0);
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
    throw new Error('Migration20261209000000_organizations cannot be undone: organization wallets hold ledger entries.');
  }
}
