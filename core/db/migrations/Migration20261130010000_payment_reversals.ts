import { Migration } from '@mikro-orm/migrations';

/**
 * Refunds and disputes of payments (issue 31, docs/payments.md, "Refunds and disputes"): the
 * coins of a refunded or disputed top-up are taken back from the purchased pocket, which may go
 * below zero (the coins may be spent already), and a won dispute gives them back.
 *
 * - wallets.purchased_micro and the purchased pocket's ledger balances may be negative; every
 *   other pocket stays at zero or more.
 * - ledger kind `payment_reversal`, written only by mas_reverse_payment (one entry, purchased
 *   pocket, idempotent on its key, like mas_credit).
 * - payment_reversals: one row per step taken (a refund's increase of the refunded amount, a
 *   dispute, a dispute won), unique on its ledger key, written with its ledger entry, pointing at
 *   the payments row it reverses.
 * - mas_reserve and mas_reserve_many refuse every reservation while the purchased pocket is
 *   negative (`negative_balance`): a debt is never spent past, nor hidden by subscription coins.
 * - mas_adjust never takes from a negative purchased pocket (a correction down takes the
 *   subscription pocket only then).
 */
export class Migration20261130010000_payment_reversals extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table wallets drop constraint wallets_purchased_micro_check;
      alter table ledger_entries drop constraint ledger_entries_balance_after_micro_check;
      alter table ledger_entries add constraint ledger_entries_balance_after_micro_check
        check (balance_after_micro >= 0 or pocket = 'purchased');
      alter table ledger_entries drop constraint ledger_entries_kind_check;
      alter table ledger_entries add constraint ledger_entries_kind_check
        check (kind in ('topup', 'subscription_grant', 'reservation', 'capture', 'release', 'adjustment', 'refund', 'payment_reversal'));

      create index payments_payment_intent on payments (payment_intent_id);

      create table payment_reversals (
        id text primary key,
        payment_id text not null references payments (id),
        account_id text not null references accounts (id),
        kind text not null check (kind in ('refund', 'dispute', 'dispute_won')),
        provider_object_id text not null,
        amount_cents bigint not null check (amount_cents > 0),
        coins_micro bigint not null check (coins_micro <> 0),
        step_key text not null,
        event_id text not null,
        ledger_entry_id bigint not null references ledger_entries (id),
        created_at timestamptz not null default now(),
        constraint payment_reversals_step_key unique (step_key),
        constraint payment_reversals_ledger_entry_key unique (ledger_entry_id)
      );
      create index payment_reversals_payment on payment_reversals (payment_id, created_at);
    `);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_reverse_payment(p_account text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
 RETURNS TABLE(status text, entry_id bigint, balance_after bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        w wallets%rowtype;
        e ledger_entries%rowtype;
      begin
        if p_amount = 0 then
          raise exception 'a payment reversal must not be 0';
        end if;
        select * into w from wallets where account_id = p_account for update;
        if not found then
          return query select 'no_wallet'::text, null::bigint, null::bigint;
          return;
        end if;
        select * into e from ledger_entries where idempotency_key = p_idempotency_key;
        if found then
          return query select 'duplicate'::text, e.id, e.balance_after_micro;
          return;
        end if;
        update wallets set purchased_micro = purchased_micro + p_amount, updated_at = now()
          where account_id = p_account returning * into w;
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
          values (p_account, 'purchased', 'payment_reversal', p_amount, w.purchased_micro, p_reference, p_idempotency_key, p_description)
          returning * into e;
        return query select 'applied'::text, e.id, w.purchased_micro;
      end $function$`);
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
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_adjust(p_account text, p_kind text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
 RETURNS TABLE(status text, entry_id bigint, available bigint)
 LANGUAGE plpgsql
AS $function$
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
        if w.subscription_micro + greatest(w.purchased_micro, 0) < -p_amount then
          return query select 'insufficient'::text, null::bigint, w.subscription_micro + w.purchased_micro;
          return;
        end if;
        from_pur := least(greatest(w.purchased_micro, 0), -p_amount);
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
      end $function$`);
  }

  override async down(): Promise<void> {
    throw new Error('not reversible: a purchased pocket may be negative by now; restore the previous functions from git history first');
  }
}
