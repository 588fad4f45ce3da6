import { Migration } from '@mikro-orm/migrations';

/**
 * Accounts, wallets, API keys, holds and the append-only ledger.
 *
 * The wallet operations are PL/pgSQL functions so that each one is a single statement: one
 * round trip, its own transaction, and a row lock on the wallet (and the hold) taken before
 * anything is read. Application code never reads a balance and writes it back.
 *
 * Pockets: `subscription` and `purchased` are spendable; `held` is what open reservations
 * hold. The sum of an account's ledger amounts always equals subscription + purchased + held.
 */
export class Migration20261122000000_foundation extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table accounts (
        id text primary key,
        email text not null,
        paid boolean not null default false,
        created_at timestamptz not null default now()
      );
      create unique index accounts_email_key on accounts (lower(email));

      create table wallets (
        account_id text primary key references accounts (id),
        subscription_micro bigint not null default 0 check (subscription_micro >= 0),
        purchased_micro bigint not null default 0 check (purchased_micro >= 0),
        held_micro bigint not null default 0 check (held_micro >= 0),
        updated_at timestamptz not null default now()
      );

      create table api_keys (
        id text primary key,
        account_id text not null references accounts (id),
        name text not null,
        prefix text not null,
        key_hash text not null unique,
        created_at timestamptz not null default now(),
        last_used_at timestamptz,
        revoked_at timestamptz
      );
      create index api_keys_account_active on api_keys (account_id) where revoked_at is null;

      create table holds (
        id text primary key,
        account_id text not null references accounts (id),
        amount_micro bigint not null check (amount_micro >= 0),
        from_subscription_micro bigint not null check (from_subscription_micro >= 0),
        from_purchased_micro bigint not null check (from_purchased_micro >= 0),
        status text not null default 'open' check (status in ('open', 'settled', 'released')),
        captured_micro bigint,
        reference text not null,
        metadata jsonb not null default '{}',
        expires_at timestamptz not null,
        created_at timestamptz not null default now(),
        ended_at timestamptz,
        check (from_subscription_micro + from_purchased_micro = amount_micro),
        check ((status = 'open') = (ended_at is null)),
        check (captured_micro is null or (captured_micro >= 0 and captured_micro <= amount_micro))
      );
      create index holds_account on holds (account_id, created_at desc);
      create index holds_open_by_expiry on holds (expires_at) where status = 'open';

      create table ledger_entries (
        id bigint generated always as identity primary key,
        account_id text not null references accounts (id),
        pocket text not null check (pocket in ('subscription', 'purchased', 'held')),
        kind text not null check (kind in ('topup', 'subscription_grant', 'reservation', 'capture', 'release')),
        amount_micro bigint not null check (amount_micro <> 0),
        balance_after_micro bigint not null check (balance_after_micro >= 0),
        reference text not null,
        hold_id text references holds (id),
        idempotency_key text not null unique,
        description text not null,
        created_at timestamptz not null default now()
      );
      create index ledger_entries_account on ledger_entries (account_id, id desc);
      create index ledger_entries_hold on ledger_entries (hold_id) where hold_id is not null;

      create function ledger_entries_append_only() returns trigger language plpgsql as $$
      begin
        raise exception 'ledger_entries is append-only';
      end $$;
      create trigger ledger_entries_append_only before update or delete on ledger_entries
        for each statement execute function ledger_entries_append_only();
    `);

    // Credit a spendable pocket (top-up or subscription grant). Idempotent on p_idempotency_key:
    // a repeat returns the first entry with status 'duplicate'. The wallet row lock is taken
    // first, so a concurrent repeat waits and then sees the committed entry.
    this.addSql(`
      create function mas_credit(
        p_account text, p_pocket text, p_kind text, p_amount bigint,
        p_reference text, p_idempotency_key text, p_description text
      ) returns table (status text, entry_id bigint, balance_after bigint)
      language plpgsql as $$
      declare
        w wallets%rowtype;
        e ledger_entries%rowtype;
        after bigint;
      begin
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
        if p_amount <= 0 then
          raise exception 'credit amount must be positive';
        end if;
        if p_pocket = 'subscription' then
          update wallets set subscription_micro = subscription_micro + p_amount, updated_at = now()
            where account_id = p_account returning subscription_micro into after;
        elsif p_pocket = 'purchased' then
          update wallets set purchased_micro = purchased_micro + p_amount, updated_at = now()
            where account_id = p_account returning purchased_micro into after;
        else
          raise exception 'credit pocket must be subscription or purchased';
        end if;
        update accounts set paid = true where id = p_account and not paid;
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
          values (p_account, p_pocket, p_kind, p_amount, after, p_reference, p_idempotency_key, p_description)
          returning * into e;
        return query select 'credited'::text, e.id, after;
      end $$;
    `);

    // Reserve p_amount, subscription coins first. Idempotent on the hold id chosen by the caller.
    this.addSql(`
      create function mas_reserve(
        p_hold_id text, p_account text, p_amount bigint, p_reference text,
        p_expires_at timestamptz, p_metadata jsonb
      ) returns table (status text, available bigint)
      language plpgsql as $$
      declare
        w wallets%rowtype;
        from_sub bigint;
        from_pur bigint;
      begin
        if p_amount < 0 then
          raise exception 'reserve amount must not be negative';
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
      end $$;
    `);

    // End a hold exactly once: capture p_actual (subscription coins first) and return the rest
    // to the pockets it came from. A hold that already ended is returned as it ended, unchanged.
    this.addSql(`
      create function mas_end_hold(p_hold_id text, p_actual bigint, p_outcome text)
      returns table (status text, captured bigint, amount bigint)
      language plpgsql as $$
      declare
        h holds%rowtype;
        w wallets%rowtype;
        cap_sub bigint;
        cap_pur bigint;
        ret_sub bigint;
        ret_pur bigint;
      begin
        select * into h from holds where id = p_hold_id for update;
        if not found then
          return query select 'not_found'::text, null::bigint, null::bigint;
          return;
        end if;
        if h.status <> 'open' then
          return query select h.status, h.captured_micro, h.amount_micro;
          return;
        end if;
        if p_outcome not in ('settled', 'released') then
          raise exception 'outcome must be settled or released';
        end if;
        if p_actual < 0 or p_actual > h.amount_micro or (p_outcome = 'released' and p_actual <> 0) then
          return query select 'invalid_amount'::text, null::bigint, h.amount_micro;
          return;
        end if;
        cap_sub := least(h.from_subscription_micro, p_actual);
        cap_pur := p_actual - cap_sub;
        ret_sub := h.from_subscription_micro - cap_sub;
        ret_pur := h.from_purchased_micro - cap_pur;
        update wallets set
          subscription_micro = subscription_micro + ret_sub,
          purchased_micro = purchased_micro + ret_pur,
          held_micro = held_micro - h.amount_micro,
          updated_at = now()
        where account_id = h.account_id
        returning * into w;
        update holds set status = p_outcome, captured_micro = p_actual, ended_at = now() where id = p_hold_id;
        -- The capture is written first with the held balance as it stands after it; the release
        -- of the remainder then brings held to its final value.
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description)
        select h.account_id, x.pocket, x.kind, x.amount, x.after, h.reference, h.id, h.id || ':' || x.kind || ':' || x.pocket, x.description
        from (values
          (1, 'held', 'capture', -p_actual, w.held_micro + (h.amount_micro - p_actual), 'API usage'),
          (2, 'held', 'release', -(h.amount_micro - p_actual), w.held_micro, 'Release of unused reservation'),
          (3, 'subscription', 'release', ret_sub, w.subscription_micro, 'Release of unused reservation'),
          (4, 'purchased', 'release', ret_pur, w.purchased_micro, 'Release of unused reservation')
        ) as x (ord, pocket, kind, amount, after, description)
        where x.amount <> 0
        order by x.ord;
        return query select p_outcome, p_actual, h.amount_micro;
      end $$;
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop function if exists mas_end_hold(text, bigint, text);
      drop function if exists mas_reserve(text, text, bigint, text, timestamptz, jsonb);
      drop function if exists mas_credit(text, text, text, bigint, text, text, text);
      drop table if exists ledger_entries;
      drop function if exists ledger_entries_append_only();
      drop table if exists holds;
      drop table if exists api_keys;
      drop table if exists wallets;
      drop table if exists accounts;
    `);
  }
}
