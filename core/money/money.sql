-- The money functions of the service, as they are defined today: the one place to read them.
--
-- Every wallet change happens here, in one statement, with its ledger entry in the same
-- transaction (docs/architecture.md, "Money"). The migrations in core/db/migrations are the
-- history that led here and stay immutable; a change to a function is a new migration AND an
-- edit of this file. test/integration/money-sql.test.ts runs this file against the migrated
-- database and fails if it would change any definition, so the two never drift apart.
--
-- Amounts are integer micro-coins (1 coin = 1,000,000). Pockets: subscription and purchased
-- are spendable, held is what open reservations hold. Only the purchased pocket may be negative
-- (mas_reverse_payment); while it is, nothing is reserved. Locks are taken hold first, then wallet;
-- a payment's lock (mas_lock_payment) before its account's wallet.

-- ledger_entries_append_only: The ledger is append-only: a trigger refuses every UPDATE and DELETE of ledger_entries.
CREATE OR REPLACE FUNCTION public.ledger_entries_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
      begin
        raise exception 'ledger_entries is append-only';
      end $function$
;

-- mas_adjust: An operator's correction (kind adjustment, either sign) or a refund of a settled job (kind refund,
-- positive): up into the purchased pocket; down out of the purchased pocket first, then the subscription
-- pocket, never more than they hold ('insufficient'; held coins are never taken, nor coins of a negative
-- purchased pocket). Idempotent on p_idempotency_key. Does not change whether the account is paid.
CREATE OR REPLACE FUNCTION public.mas_adjust(p_account text, p_kind text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
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
      end $function$
;

-- mas_app_spend_room: What an app connection may still reserve under its spend cap: the cap minus what it
-- captured and what it holds open; null when it has no cap. The caller locks the connection row.
CREATE OR REPLACE FUNCTION public.mas_app_spend_room(p_connection_id text)
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
      $function$
;

-- mas_credit: A top-up (purchased pocket) or a subscription grant (subscription pocket): adds to the pocket,
-- marks the account paid, writes one ledger entry. Idempotent on p_idempotency_key: a repeat
-- returns 'duplicate' and the first entry, moving nothing. 'no_wallet' for an unknown account.
CREATE OR REPLACE FUNCTION public.mas_credit(p_account text, p_pocket text, p_kind text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
 RETURNS TABLE(status text, entry_id bigint, balance_after bigint)
 LANGUAGE plpgsql
AS $function$
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
      end $function$
;

-- mas_dispute_rank: How far a dispute has gone: an inquiry 0, funds withdrawn 1, won (funds reinstated), lost or
-- closed (an inquiry closed, a dispute prevented) 2, final. A dispute's recorded state only moves up.
CREATE OR REPLACE FUNCTION public.mas_dispute_rank(p_state text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
        select case when p_state in ('won', 'lost', 'closed') then 2 when p_state = 'withdrawn' then 1 else 0 end
      $function$
;

-- mas_end_hold: Ends one hold exactly once. 'settled': captures p_actual (at most the hold) as `API usage`
-- and returns the rest to the pockets it came from (the capture is taken from the subscription
-- coins first, as the reservation was); 'released': returns all of it. A hold that already
-- ended returns its first outcome and moves nothing.
CREATE OR REPLACE FUNCTION public.mas_end_hold(p_hold_id text, p_actual bigint, p_outcome text)
 RETURNS TABLE(status text, captured bigint, amount bigint)
 LANGUAGE plpgsql
AS $function$
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
      end $function$
;

-- mas_end_hold_many: mas_end_hold for a JSON list of items, in one statement (the chat hot path's group commit):
-- each wallet is locked once (in account order, so two batches cannot deadlock), carried in
-- variables and written once; the ledger entries of the batch are inserted by one statement.
-- Each item gets its own outcome, as mas_end_hold would give it.
CREATE OR REPLACE FUNCTION public.mas_end_hold_many(p_items jsonb)
 RETURNS TABLE(i integer, status text, captured bigint, amount bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        x record;
        hd holds%rowtype;
        acct text;              -- the account whose wallet is in w (locked), once one is
        w wallets%rowtype;      -- that wallet as the items so far have left it
        dirty boolean := false; -- w differs from the stored row
        cap_sub bigint;
        cap_pur bigint;
        ret_sub bigint;
        ret_pur bigint;
        l_account text[] := '{}';
        l_pocket text[] := '{}';
        l_kind text[] := '{}';
        l_amount bigint[] := '{}';
        l_after bigint[] := '{}';
        l_reference text[] := '{}';
        l_hold text[] := '{}';
        l_description text[] := '{}';
      begin
        for x in
          select t.*, (select h.account_id from holds h where h.id = t.hold_id) as account_id
            from jsonb_to_recordset(p_items) as t (i int, hold_id text, actual bigint, outcome text)
          order by 5, t.hold_id, t.i
        loop
          i := x.i;
          select * into hd from holds where id = x.hold_id for update;
          if not found then
            status := 'not_found'; captured := null; amount := null;
            return next;
            continue;
          end if;
          if hd.status <> 'open' then
            status := hd.status; captured := hd.captured_micro; amount := hd.amount_micro;
            return next;
            continue;
          end if;
          if x.outcome not in ('settled', 'released') then
            raise exception 'outcome must be settled or released';
          end if;
          if x.actual < 0 or x.actual > hd.amount_micro or (x.outcome = 'released' and x.actual <> 0) then
            status := 'invalid_amount'; captured := null; amount := hd.amount_micro;
            return next;
            continue;
          end if;
          if acct is distinct from hd.account_id then
            if dirty then
              perform mas_write_wallet(w);
              dirty := false;
            end if;
            acct := hd.account_id;
            select * into w from wallets where account_id = acct for update;
            if not found then
              raise exception 'no wallet for account %', acct;
            end if;
          end if;
          cap_sub := least(hd.from_subscription_micro, x.actual);
          cap_pur := x.actual - cap_sub;
          ret_sub := hd.from_subscription_micro - cap_sub;
          ret_pur := hd.from_purchased_micro - cap_pur;
          w.subscription_micro := w.subscription_micro + ret_sub;
          w.purchased_micro := w.purchased_micro + ret_pur;
          w.held_micro := w.held_micro - hd.amount_micro;
          dirty := true;
          update holds set status = x.outcome, captured_micro = x.actual, ended_at = now() where id = hd.id;
          -- As mas_end_hold: the capture first, with the held balance as it stands after it;
          -- the release of the remainder then brings held to its final value.
          if x.actual <> 0 then
            l_account := l_account || hd.account_id; l_pocket := l_pocket || 'held'::text; l_kind := l_kind || 'capture'::text;
            l_amount := l_amount || -x.actual; l_after := l_after || (w.held_micro + (hd.amount_micro - x.actual));
            l_reference := l_reference || hd.reference; l_hold := l_hold || hd.id; l_description := l_description || 'API usage'::text;
          end if;
          if hd.amount_micro - x.actual <> 0 then
            l_account := l_account || hd.account_id; l_pocket := l_pocket || 'held'::text; l_kind := l_kind || 'release'::text;
            l_amount := l_amount || -(hd.amount_micro - x.actual); l_after := l_after || w.held_micro;
            l_reference := l_reference || hd.reference; l_hold := l_hold || hd.id; l_description := l_description || 'Release of unused reservation'::text;
          end if;
          if ret_sub <> 0 then
            l_account := l_account || hd.account_id; l_pocket := l_pocket || 'subscription'::text; l_kind := l_kind || 'release'::text;
            l_amount := l_amount || ret_sub; l_after := l_after || w.subscription_micro;
            l_reference := l_reference || hd.reference; l_hold := l_hold || hd.id; l_description := l_description || 'Release of unused reservation'::text;
          end if;
          if ret_pur <> 0 then
            l_account := l_account || hd.account_id; l_pocket := l_pocket || 'purchased'::text; l_kind := l_kind || 'release'::text;
            l_amount := l_amount || ret_pur; l_after := l_after || w.purchased_micro;
            l_reference := l_reference || hd.reference; l_hold := l_hold || hd.id; l_description := l_description || 'Release of unused reservation'::text;
          end if;
          status := x.outcome; captured := x.actual; amount := hd.amount_micro;
          return next;
        end loop;
        if dirty then
          perform mas_write_wallet(w);
        end if;
        insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description)
        select u.account, u.pocket, u.kind, u.amount, u.after, u.reference, u.hold, u.hold || ':' || u.kind || ':' || u.pocket, u.description
        from unnest(l_account, l_pocket, l_kind, l_amount, l_after, l_reference, l_hold, l_description) with ordinality
          as u (account, pocket, kind, amount, after, reference, hold, description, ord)
        order by u.ord;
      end $function$
;

-- mas_key_period_start: Where a key's spend-limit period begins: the first instant of the current calendar month
-- (UTC) for 'monthly', the beginning of time for 'total'.
CREATE OR REPLACE FUNCTION public.mas_key_period_start(p_period text)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
        select case p_period when 'monthly' then date_trunc('month', now(), 'UTC') else '-infinity'::timestamptz end
      $function$
;

-- mas_key_spend_room: What a standard API key may still reserve under its spend limit: the limit minus what it
-- captured in the limit's period (holds settled since mas_key_period_start) and what it holds open;
-- null when it has no limit. The caller locks the key row. Two index range scans of holds_by_key.
CREATE OR REPLACE FUNCTION public.mas_key_spend_room(p_key_id text)
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
      $function$
;

-- mas_lock_payment: The lock of one payment, by its PaymentIntent, to the end of the transaction: every record of a
-- refund or dispute and every settle take it, and the credit of the payment takes it before it settles,
-- so a refund arriving while its payment is being credited is taken back by one of the two, never by
-- neither (the one that waits sees the other's rows).
CREATE OR REPLACE FUNCTION public.mas_lock_payment(p_payment_intent text)
 RETURNS void
 LANGUAGE sql
AS $function$
        select pg_advisory_xact_lock(hashtextextended('mas_payment:' || p_payment_intent, 0));
      $function$
;

-- mas_member_spend_room: What an organization member may still reserve under the spend limit an admin set for them,
-- through the key p_key_id (one of theirs): the limit minus what all their keys of the organization
-- captured in the limit's period and hold open; null when the key has no member or the member no
-- limit. The caller locks the member's row. Range scans of holds_by_key, one per key of the member.
CREATE OR REPLACE FUNCTION public.mas_member_spend_room(p_key_id text)
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
      $function$
;

-- mas_payment_refunded_cents: What the refunds of a payment (by its PaymentIntent) returned to the customer, as far as the
-- events told: the larger of the charges' refunded amounts (charge.refunded) less the refunds that
-- failed or were canceled, and the refunds still standing (refund.* events). Never more than Stripe
-- said; the settle caps it at the payment.
CREATE OR REPLACE FUNCTION public.mas_payment_refunded_cents(p_payment_intent text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
        select greatest(0,
          coalesce((select sum(c.refunded_cents) from charge_refunds c where c.payment_intent_id = p_payment_intent), 0)
            - coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) = 2), 0),
          coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) < 2), 0))::bigint
      $function$
;

-- mas_record_charge_refund: charge.refunded, under the payment's lock: keeps the largest amount Stripe said was refunded
-- of the charge in all (an older event arriving late lowers nothing). Answers what the payment's
-- refunds came to before and after.
CREATE OR REPLACE FUNCTION public.mas_record_charge_refund(p_payment_intent text, p_charge text, p_refunded_cents bigint)
 RETURNS TABLE(refunded_before bigint, refunded_after bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        was bigint;
      begin
        perform mas_lock_payment(p_payment_intent);
        was := mas_payment_refunded_cents(p_payment_intent);
        insert into charge_refunds as c (charge_id, payment_intent_id, refunded_cents)
          values (p_charge, p_payment_intent, p_refunded_cents)
          on conflict (charge_id) do update set refunded_cents = greatest(c.refunded_cents, excluded.refunded_cents), updated_at = now();
        return query select was, mas_payment_refunded_cents(p_payment_intent);
      end $function$
;

-- mas_record_dispute: A dispute event, under the payment's lock: keeps the dispute with the furthest state it reached
-- (mas_dispute_rank; an event of an earlier step changes nothing: a `created` after `closed won`) and
-- the amount of the event that set it. Answers the state before and the state kept.
CREATE OR REPLACE FUNCTION public.mas_record_dispute(p_payment_intent text, p_dispute text, p_charge text, p_amount_cents bigint, p_state text, p_status text)
 RETURNS TABLE(previous_state text, kept_state text)
 LANGUAGE plpgsql
AS $function$
      declare
        was text;
        kept text;
      begin
        perform mas_lock_payment(p_payment_intent);
        select d.state into was from payment_disputes d where d.dispute_id = p_dispute;
        insert into payment_disputes as d (dispute_id, payment_intent_id, charge_id, amount_cents, state, status)
          values (p_dispute, p_payment_intent, p_charge, p_amount_cents, p_state, p_status)
          on conflict (dispute_id) do update set
            state = case when mas_dispute_rank(excluded.state) > mas_dispute_rank(d.state) then excluded.state else d.state end,
            status = case when mas_dispute_rank(excluded.state) > mas_dispute_rank(d.state) then excluded.status else d.status end,
            amount_cents = case when mas_dispute_rank(excluded.state) > mas_dispute_rank(d.state) then excluded.amount_cents else d.amount_cents end,
            updated_at = now()
          returning d.state into kept;
        return query select was, kept;
      end $function$
;

-- mas_record_refund: A refund object's event, under the payment's lock: keeps the refund with the furthest status it
-- reached (mas_refund_rank) and its largest amount. Answers what the payment's refunds came to before
-- and after, and the status kept.
CREATE OR REPLACE FUNCTION public.mas_record_refund(p_payment_intent text, p_refund text, p_charge text, p_amount_cents bigint, p_status text)
 RETURNS TABLE(refunded_before bigint, refunded_after bigint, kept_status text)
 LANGUAGE plpgsql
AS $function$
      declare
        was bigint;
        kept text;
      begin
        perform mas_lock_payment(p_payment_intent);
        was := mas_payment_refunded_cents(p_payment_intent);
        insert into payment_refunds as r (refund_id, payment_intent_id, charge_id, amount_cents, status)
          values (p_refund, p_payment_intent, p_charge, p_amount_cents, p_status)
          on conflict (refund_id) do update set
            status = case when mas_refund_rank(excluded.status) > mas_refund_rank(r.status) then excluded.status else r.status end,
            amount_cents = greatest(r.amount_cents, excluded.amount_cents),
            updated_at = now()
          returning r.status into kept;
        return query select was, mas_payment_refunded_cents(p_payment_intent), kept;
      end $function$
;

-- mas_refund_rank: How far a refund has gone: pending or requires_action 0, succeeded 1, failed or canceled 2, final.
CREATE OR REPLACE FUNCTION public.mas_refund_rank(p_status text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
        select case when p_status in ('failed', 'canceled') then 2 when p_status = 'succeeded' then 1 else 0 end
      $function$
;

-- mas_reserve: Moves p_amount of an account's spendable coins into its held pocket, subscription coins
-- first; refuses ('insufficient') when they do not fit, and refuses everything ('negative_balance',
-- available = the purchased pocket) while the purchased pocket is below zero (a refund or dispute
-- took back coins already spent). An app connection's spend cap ('spend_cap_reached') and a standard key's
-- spend limit ('key_spend_limit_reached', metadata key_id) are checked first. Idempotent on the hold id.
CREATE OR REPLACE FUNCTION public.mas_reserve(p_hold_id text, p_account text, p_amount bigint, p_reference text, p_expires_at timestamp with time zone, p_metadata jsonb)
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
      end $function$
;

-- mas_reserve_many: mas_reserve for a JSON list of items, in one statement, with the same outcomes (also
-- 'negative_balance', 'spend_cap_reached', 'key_spend_limit_reached'); an item with a key id reserves only
-- while that key is active (not revoked, not expired) and its account not disabled (else 'key_revoked',
-- nothing held). Reservations
-- commit without waiting for the disk: the settle's synchronous commit makes them durable.
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
      end $function$
;

-- mas_reverse_payment: A payment taken back (a refund or a dispute at the payment provider: p_amount < 0) or given
-- back (a dispute won, a refund failed: p_amount > 0), on the purchased pocket only, which may go below
-- zero: the coins were spent already. One ledger entry, kind payment_reversal. Idempotent on
-- p_idempotency_key. Called by mas_settle_payment, which decides the amounts.
CREATE OR REPLACE FUNCTION public.mas_reverse_payment(p_account text, p_amount bigint, p_reference text, p_idempotency_key text, p_description text)
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
      end $function$
;

-- mas_settle_payment: Brings what one credited payment (by its PaymentIntent) has taken back in line with its refunds
-- and disputes as recorded, under the payment's lock, and answers each step. Each claim wants cents:
-- the refunds together what mas_payment_refunded_cents says; each dispute its amount while its funds
-- are withdrawn (withdrawn, lost), else nothing. A claim holds what its steps took less what they gave
-- back. First each claim holding more than it wants gives the rest back (`refund_failed`,
-- `dispute_won`); then each claim wanting more takes it (refunds first, then the disputes in the order
-- they were first recorded: `refund`, `dispute`) while the payment has room: what the claims hold
-- together never exceeds the payment's cents. Each step: one ledger entry on the purchased pocket
-- (mas_reverse_payment, key stripe:reversal:<payment>:<n>, 1 cent = 10,000,000 micro-coins) and one
-- payment_reversals row. Nothing while no payment of the PaymentIntent is credited: its credit settles.
CREATE OR REPLACE FUNCTION public.mas_settle_payment(p_payment_intent text, p_event_id text)
 RETURNS TABLE(step_kind text, step_object text, step_cents bigint, step_micro bigint, step_entry bigint, purchased_after bigint)
 LANGUAGE plpgsql
AS $function$
      declare
        p payments%rowtype;
        c record;
        moved record;
        n integer;
        room bigint;
        step bigint;
        k text;
        refund_ref text;
      begin
        perform mas_lock_payment(p_payment_intent);
        select * into p from payments where payment_intent_id = p_payment_intent order by created_at, id limit 1 for update;
        if not found then
          return;
        end if;
        select count(*) into n from payment_reversals r where r.payment_id = p.id;
        -- The refunds' steps name the charge refunded (its latest event), else the PaymentIntent.
        refund_ref := coalesce(
          (select cr.charge_id from charge_refunds cr where cr.payment_intent_id = p_payment_intent order by cr.updated_at desc limit 1),
          (select pr.charge_id from payment_refunds pr where pr.payment_intent_id = p_payment_intent and pr.charge_id is not null order by pr.updated_at desc limit 1),
          p_payment_intent);
        -- Pass 1 gives back what a claim holds beyond what it wants; pass 2 takes what a claim wants beyond what it holds.
        for pass in 1..2 loop
          room := p.amount_cents - coalesce((
            select sum(case when r.kind in ('refund', 'dispute') then r.amount_cents else -r.amount_cents end)
            from payment_reversals r where r.payment_id = p.id), 0);
          for c in
            select x.claim, x.ref, x.wanted, x.held from (
              select 0 as ord, 0::bigint as seq, 'refund'::text as claim, refund_ref as ref,
                     mas_payment_refunded_cents(p_payment_intent) as wanted,
                     coalesce((select sum(case r.kind when 'refund' then r.amount_cents else -r.amount_cents end) from payment_reversals r
                               where r.payment_id = p.id and r.kind in ('refund', 'refund_failed')), 0) as held
              union all
              select 1, d.seq, 'dispute', d.dispute_id,
                     case when d.state in ('withdrawn', 'lost') then d.amount_cents else 0 end,
                     coalesce((select sum(case r.kind when 'dispute' then r.amount_cents else -r.amount_cents end) from payment_reversals r
                               where r.payment_id = p.id and r.kind in ('dispute', 'dispute_won') and r.provider_object_id = d.dispute_id), 0)
              from payment_disputes d where d.payment_intent_id = p_payment_intent
            ) x order by x.ord, x.seq
          loop
            if pass = 1 and c.held > c.wanted then
              step := c.held - c.wanted;
              step_kind := case c.claim when 'refund' then 'refund_failed' else 'dispute_won' end;
              step_micro := step * 10000000;
            elsif pass = 2 and c.wanted > c.held and room > 0 then
              step := least(c.wanted - c.held, room);
              room := room - step;
              step_kind := c.claim;
              step_micro := -step * 10000000;
            else
              continue;
            end if;
            n := n + 1;
            k := 'stripe:reversal:' || p.id || ':' || n;
            select * into moved from mas_reverse_payment(p.account_id, step_micro, c.ref, k,
              case step_kind when 'refund' then 'Refund (Stripe)' when 'refund_failed' then 'Refund failed' when 'dispute' then 'Dispute' else 'Dispute won' end);
            if moved.status <> 'applied' then
              raise exception 'payment reversal % not applied: %', k, moved.status;
            end if;
            insert into payment_reversals (id, payment_id, account_id, kind, provider_object_id, amount_cents, coins_micro, step_key, event_id, ledger_entry_id)
              values ('prv_' || left(md5(k), 24), p.id, p.account_id, step_kind, c.ref, step, step_micro, k, p_event_id, moved.entry_id);
            step_object := c.ref;
            step_cents := step;
            step_entry := moved.entry_id;
            purchased_after := moved.balance_after;
            return next;
          end loop;
        end loop;
      end $function$
;

-- mas_write_wallet: Writes back a wallet carried in variables by the batched functions.
CREATE OR REPLACE FUNCTION public.mas_write_wallet(p wallets)
 RETURNS void
 LANGUAGE sql
AS $function$
        update wallets set subscription_micro = p.subscription_micro, purchased_micro = p.purchased_micro,
          held_micro = p.held_micro, updated_at = now()
        where account_id = p.account_id;
      $function$
;

create or replace trigger ledger_entries_append_only before update or delete on ledger_entries
  for each statement execute function ledger_entries_append_only();
