import { Migration } from '@mikro-orm/migrations';

/**
 * Refunds and disputes of one payment take back at most what it credited, in any order of their
 * events, and one that arrives before its payment is credited waits for it (issue 45, group 1;
 * docs/payments.md, "Refunds and disputes").
 *
 * Before: each refund step was capped at the payment but ignored disputes, each dispute ignored
 * refunds (a 20 USD top-up refunded and disputed lost 40,000 coins), a refund or dispute of a
 * payment not credited yet was dropped, and a dispute created after it was won took its coins
 * for good. Now what Stripe said about a payment (by its PaymentIntent) is kept, whether or not
 * the payment is credited yet, and the coins follow it:
 *
 * - charge_refunds: per charge, the largest `amount_refunded` a charge.refunded event gave (it
 *   only grows; an older event arriving late lowers nothing).
 * - payment_refunds: per refund object (refund.created/updated/failed, charge.refund.updated),
 *   its amount and the furthest status it reached (pending or requires_action, then succeeded,
 *   then failed or canceled, final): a refund that fails gives its coins back.
 * - payment_disputes: per dispute, the furthest state it reached: inquiry (no funds withdrawn),
 *   withdrawn, then won (funds reinstated), lost or closed (an inquiry closed, a dispute
 *   prevented), final. A late `created` after `closed` changes nothing.
 * - mas_settle_payment: under the payment's lock (mas_lock_payment, an advisory lock on the
 *   PaymentIntent that every step of one payment takes, the credit included), brings the coins
 *   taken back in line: the refunds together and each withdrawn dispute want their cents; a claim
 *   holding more than it wants gives the rest back (`refund_failed`, `dispute_won`); then the
 *   claims wanting more take it, refunds first, while the payment has room. What they hold
 *   together never exceeds the payment. Each step: one ledger entry (mas_reverse_payment, key
 *   `stripe:reversal:<payment id>:<n>`) and one payment_reversals row.
 * - payment_reversals.kind gains `refund_failed`.
 *
 * The rows of the earlier payment_reversals are read back into the new tables: a payment's
 * refund steps as its charge's refunded cents, its disputes as withdrawn, or won when they were
 * given back. Payments that the earlier rules over-took (a refund and a dispute of the same
 * payment both taken) are left as they are: an operator corrects them (adjustBalance).
 */
export class Migration20261208100000_payment_claims extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table charge_refunds (
        charge_id text primary key,
        payment_intent_id text not null,
        refunded_cents bigint not null check (refunded_cents >= 0),
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index charge_refunds_payment_intent on charge_refunds (payment_intent_id);

      create table payment_refunds (
        refund_id text primary key,
        payment_intent_id text not null,
        charge_id text,
        amount_cents bigint not null check (amount_cents >= 0),
        status text not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index payment_refunds_payment_intent on payment_refunds (payment_intent_id);

      create table payment_disputes (
        dispute_id text primary key,
        seq bigint generated always as identity,
        payment_intent_id text not null,
        charge_id text,
        amount_cents bigint not null check (amount_cents >= 0),
        state text not null check (state in ('inquiry', 'withdrawn', 'won', 'lost', 'closed')),
        status text not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
      create index payment_disputes_payment_intent on payment_disputes (payment_intent_id, seq);

      alter table payment_reversals drop constraint payment_reversals_kind_check;
      alter table payment_reversals add constraint payment_reversals_kind_check check (kind in ('refund', 'refund_failed', 'dispute', 'dispute_won'));

      insert into charge_refunds (charge_id, payment_intent_id, refunded_cents)
        select r.provider_object_id, min(p.payment_intent_id), sum(r.amount_cents)
        from payment_reversals r join payments p on p.id = r.payment_id
        where r.kind = 'refund' and p.payment_intent_id is not null
        group by r.provider_object_id;
      insert into payment_disputes (dispute_id, payment_intent_id, amount_cents, state, status)
        select r.provider_object_id, min(p.payment_intent_id), coalesce(max(r.amount_cents) filter (where r.kind = 'dispute'), 0),
               case when bool_or(r.kind = 'dispute_won') then 'won' else 'withdrawn' end, 'migrated'
        from payment_reversals r join payments p on p.id = r.payment_id
        where r.kind in ('dispute', 'dispute_won') and p.payment_intent_id is not null
        group by r.provider_object_id
        order by min(r.created_at);
    `);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_lock_payment(p_payment_intent text)
 RETURNS void
 LANGUAGE sql
AS $function$
        select pg_advisory_xact_lock(hashtextextended('mas_payment:' || p_payment_intent, 0));
      $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_refund_rank(p_status text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
        select case when p_status in ('failed', 'canceled') then 2 when p_status = 'succeeded' then 1 else 0 end
      $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_dispute_rank(p_state text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
        select case when p_state in ('won', 'lost', 'closed') then 2 when p_state = 'withdrawn' then 1 else 0 end
      $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_payment_refunded_cents(p_payment_intent text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
        select greatest(0,
          coalesce((select sum(c.refunded_cents) from charge_refunds c where c.payment_intent_id = p_payment_intent), 0)
            - coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) = 2), 0),
          coalesce((select sum(r.amount_cents) from payment_refunds r where r.payment_intent_id = p_payment_intent and mas_refund_rank(r.status) < 2), 0))::bigint
      $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_record_charge_refund(p_payment_intent text, p_charge text, p_refunded_cents bigint)
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
      end $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_record_refund(p_payment_intent text, p_refund text, p_charge text, p_amount_cents bigint, p_status text)
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
      end $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_record_dispute(p_payment_intent text, p_dispute text, p_charge text, p_amount_cents bigint, p_state text, p_status text)
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
      end $function$`);
    this.addSql(`CREATE OR REPLACE FUNCTION public.mas_settle_payment(p_payment_intent text, p_event_id text)
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
      end $function$`);
  }

  override async down(): Promise<void> {
    throw new Error('not reversible: the steps taken under these rules are in the ledger');
  }
}
