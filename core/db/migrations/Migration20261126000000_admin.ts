import { Migration } from '@mikro-orm/migrations';

/**
 * The admin API (issue 18, docs/admin.md): operators' identities, the audit log, accounts that
 * can be disabled, and the two ledger kinds that only operators write.
 *
 * - admin_users sign in to the admin pages with a password and a session of their own (never an
 *   account's); a one-time sign-in link, stored hashed, lets a new admin set a password.
 * - admin_audit_log: one row per admin mutation, written in the mutation's own transaction;
 *   append-only, like the ledger, and apart from it.
 * - accounts.disabled_at: a disabled account's keys, app tokens and sessions are refused, and
 *   a reservation through a key of a disabled account is refused in the same statement
 *   (mas_reserve_many's key check), so a key cached by the chat path stops too.
 * - ledger kinds `adjustment` (an operator's correction, up or down, with a reason in the audit
 *   log) and `refund` (coins given back for a settled job): mas_adjust moves them, under the
 *   wallet lock, idempotent on its key; a correction down never takes held coins and never
 *   leaves a pocket below zero.
 */
export class Migration20261126000000_admin extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table admin_users (
        id text primary key,
        email text not null,
        role text not null check (role in ('viewer', 'operator')),
        password_hash text,
        created_at timestamptz not null default now(),
        disabled_at timestamptz
      );
      create unique index admin_users_email on admin_users (lower(email));

      create table admin_sessions (
        id text primary key,
        token_hash text not null unique,
        admin_user_id text not null references admin_users (id),
        created_at timestamptz not null default now(),
        last_seen_at timestamptz not null default now(),
        expires_at timestamptz not null
      );
      create index admin_sessions_user on admin_sessions (admin_user_id);

      create table admin_login_links (
        token_hash text primary key,
        admin_user_id text not null references admin_users (id),
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        used_at timestamptz
      );

      create table admin_audit_log (
        id bigserial primary key,
        actor_type text not null check (actor_type in ('admin_token', 'admin_user', 'internal')),
        actor_id text,
        action text not null,
        target_type text not null,
        target_id text not null,
        reason text,
        before jsonb,
        after jsonb,
        request_id text,
        created_at timestamptz not null default now()
      );
      create index admin_audit_log_target on admin_audit_log (target_type, target_id, id desc);
      create index admin_audit_log_actor on admin_audit_log (actor_id, id desc);
      create index admin_audit_log_action on admin_audit_log (action, id desc);
      create index admin_audit_log_time on admin_audit_log (created_at desc);
      create function admin_audit_log_append_only() returns trigger language plpgsql as $$
      begin
        raise exception 'admin_audit_log is append-only';
      end $$;
      create trigger admin_audit_log_append_only before update or delete or truncate on admin_audit_log
        for each statement execute function admin_audit_log_append_only();

      alter table accounts add column disabled_at timestamptz;

      alter table ledger_entries drop constraint ledger_entries_kind_check;
      alter table ledger_entries add constraint ledger_entries_kind_check
        check (kind in ('topup', 'subscription_grant', 'reservation', 'capture', 'release', 'adjustment', 'refund'));
    `);
    // An operator's correction (p_kind adjustment, either sign) or a refund of a settled job
    // (p_kind refund, positive). Up: into the purchased pocket. Down: out of the purchased
    // pocket first, then the subscription pocket; never more than they hold ('insufficient').
    // Idempotent on p_idempotency_key, like mas_credit. Does not change whether the account is paid.
    this.addSql(`
      create function mas_adjust(p_account text, p_kind text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
      returns table (status text, entry_id bigint, available bigint)
      language plpgsql as $$
      declare
        w wallets%rowtype;
        e ledger_entries%rowtype;
        from_pur bigint;
        from_sub bigint;
      begin
        if p_kind not in ('adjustment', 'refund') then
          raise exception 'mas_adjust moves adjustments and refunds only';
        end if;
        if p_amount = 0 or (p_kind = 'refund' and p_amount < 0) then
          raise exception 'an adjustment must not be 0, and a refund must be positive';
        end if;
        select * into w from wallets where account_id = p_account for update;
        if not found then
          return query select 'no_wallet'::text, null::bigint, null::bigint;
          return;
        end if;
        select * into e from ledger_entries where idempotency_key in (p_idempotency_key, p_idempotency_key || ':subscription') order by id desc limit 1;
        if found then
          return query select 'duplicate'::text, e.id, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        if p_amount > 0 then
          update wallets set purchased_micro = purchased_micro + p_amount, updated_at = now()
            where account_id = p_account returning * into w;
          insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
            values (p_account, 'purchased', p_kind, p_amount, w.purchased_micro, p_reference, p_idempotency_key, p_description)
            returning * into e;
          return query select 'applied'::text, e.id, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        if w.subscription_micro + w.purchased_micro < -p_amount then
          return query select 'insufficient'::text, null::bigint, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        from_pur := least(w.purchased_micro, -p_amount);
        from_sub := -p_amount - from_pur;
        update wallets set purchased_micro = purchased_micro - from_pur, subscription_micro = subscription_micro - from_sub, updated_at = now()
          where account_id = p_account returning * into w;
        if from_sub <> 0 then
          insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
            values (p_account, 'subscription', p_kind, -from_sub, w.subscription_micro, p_reference, p_idempotency_key || ':subscription', p_description)
            returning * into e;
        end if;
        if from_pur <> 0 then
          insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
            values (p_account, 'purchased', p_kind, -from_pur, w.purchased_micro, p_reference, p_idempotency_key, p_description)
            returning * into e;
        end if;
        return query select 'applied'::text, e.id, w.subscription_micro + w.purchased_micro;
      end $$;
    `);
    // A key of a disabled account reserves nothing: the chat path's cached keys stop at once too.
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
              select 1 from api_keys k join accounts a on a.id = k.account_id
              where k.id = x.key_id and k.account_id = x.account_id and k.revoked_at is null and a.disabled_at is null
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
    throw new Error('not reversible: the ledger may hold adjustment and refund entries');
  }
}
